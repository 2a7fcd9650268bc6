"""FedAvg's Figure 1: the loss between two models, from different and from
one shared initialization.

  python -m tff_algos.interpolate --data_dir=../shared/data --out=FIG.png \\
      [--seed=0] [--points=50] [--csv=OUT.csv]

Trains three MNIST 2NN models with plain SGD as McMahan et al. 2017 (§2)
describe (`tff_algos.analysis.interpolation`: which settings are the
paper's and which are ours), and writes the loss on the full MNIST training
set of θ·w + (1 − θ)·w′ along θ ∈ [−0.2, 1.2] for w, w′ from different
initializations (left panel) and from one (right panel), as a two-panel
figure (--out: .png, .pdf or .svg) and a CSV of (case, theta, loss)
(--csv, default: --out with .csv). Prints the settings and the loss at
θ = 0, 0.5, 1 and its minimum for each case; the last line says where it
wrote. Bad input: one line on stderr, exit code 2, nothing written. Runs no
TFF computation, so it starts no TFF worker.
"""

import os
import sys
import tempfile
import time

from tff_algos import cli
from tff_algos.simulation import results
from tff_algos.simulation import run_dir

PROGRAM = 'python -m tff_algos.interpolate'
TASK = 'mnist_iid_2nn'  # Its model is the paper's 2NN; its 100 IID clients
# together are the 60,000 training images.
FIGURE_FORMATS = ('.png', '.pdf', '.svg')
MAX_POINTS = 1000  # Each point is two passes over the training set.
DESCRIPTION = (
  'FedAvg (McMahan et al. 2017) Figure 1: the loss on the full '
  "MNIST training set of theta*w + (1-theta)*w' for two 2NN "
  'models trained with SGD on disjoint 600-example samples, '
  'from different and from shared initializations.'
)
_FLAGS = (
  cli.Flag(
    'DEFINE_string',
    'data_dir',
    None,
    'The folder holding mnist/ (the four IDX files) [default: '
    '$TFF_DATA_DIR, else ~/.tff].',
  ),
  cli.Flag(
    'DEFINE_string', 'out', None, 'The figure to write (.png, .pdf or .svg).'
  ),
  cli.Flag(
    'DEFINE_string',
    'csv',
    None,
    'The CSV of (case, theta, loss) to write [default: --out with .csv].',
  ),
  cli.Flag(
    'DEFINE_integer',
    'seed',
    0,
    'Seed of every random draw: the two datasets, the '
    'initializations, the minibatch orders.',
  ),
  cli.Flag(
    'DEFINE_integer',
    'points',
    50,
    'Evenly spaced theta values over [-0.2, 1.2] (the paper: 50); '
    'theta = 0, 0.5 and 1 are evaluated too.',
  ),
)


def _usage():
  lines = [
    f'usage: {PROGRAM} --out=FIG.png [--data_dir=DIR] [--seed=0] '
    '[--points=50] [--csv=OUT.csv]',
    '',
    DESCRIPTION,
    '',
  ]
  for flag in _FLAGS:
    default = '' if flag.default is None else f' [default: {flag.default}]'
    lines += [f'  --{flag.name}', f'      {flag.help}{default}']
  return '\n'.join(lines)


def _check_output(path, flag):
  """UsageError unless `path` can be written as a file: not a folder, and
  its folder exists or can be made (`run_dir.check_usable`'s rule)."""
  if os.path.isdir(path):
    raise cli.UsageError(f'{flag}={path} is a folder; give a file name')
  try:
    run_dir.check_usable(os.path.dirname(os.path.abspath(path)), flag)
  except run_dir.OutputDirError as e:
    raise cli.UsageError(str(e)) from None


def _arguments(argv):
  """The parsed flags (`absl.flags.FlagValues`), checked; UsageError."""
  holder = cli.flag_values((), _FLAGS)
  args, _ = cli.expand_flagfiles(argv[1:])
  cli.parse(holder, args)
  if not holder.out:
    raise cli.UsageError(
      '--out is required: the figure to write (.png, .pdf or .svg)'
    )
  if os.path.isdir(holder.out):
    raise cli.UsageError(f'--out={holder.out} is a folder; give a file name')
  if os.path.splitext(holder.out)[1].lower() not in FIGURE_FORMATS:
    raise cli.UsageError(
      f'--out={holder.out}: the figure must end in {", ".join(FIGURE_FORMATS)}'
    )
  if holder.csv is None:
    holder.csv = os.path.splitext(holder.out)[0] + '.csv'
  elif not holder.csv:
    raise cli.UsageError('--csv is empty: give a file name or leave it out')
  if os.path.abspath(holder.csv) == os.path.abspath(holder.out):
    raise cli.UsageError(f'--csv and --out are the same file: {holder.out}')
  _check_output(holder.out, '--out')
  _check_output(holder.csv, '--csv')
  if holder.seed < 0:
    raise cli.UsageError(f'--seed must be >= 0, got {holder.seed}')
  if not 2 <= holder.points <= MAX_POINTS:
    raise cli.UsageError(
      f'--points must be in 2..{MAX_POINTS}, got {holder.points}'
    )
  if holder.data_dir is not None and not os.path.isdir(holder.data_dir):
    raise cli.UsageError(f'--data_dir={holder.data_dir} is not a folder')
  return holder


def _write_atomically(path, write):
  """write(temporary path), then renamed to `path`: a reader never sees a
  half-written file, and a failure leaves the old one."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  handle, temporary = tempfile.mkstemp(
    prefix='.' + os.path.basename(path) + '.',
    dir=folder,
    suffix=os.path.splitext(path)[1],
  )
  os.close(handle)
  try:
    write(temporary)
    os.chmod(temporary, 0o666 & ~_umask())
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.unlink(temporary)
    raise


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


def write_csv(path, curves):
  """case, theta, loss: one row per evaluated θ of each case."""
  rows = [
    dict(case=case, theta=repr(float(theta)), loss=repr(float(loss)))
    for case, curve in curves.items()
    for theta, loss in zip(curve.thetas, curve.losses)
  ]
  text = results.csv_text(('case', 'theta', 'loss'), rows)

  def write(temporary):
    with open(temporary, 'w', newline='') as f:
      f.write(text)

  _write_atomically(path, write)


def write_figure(path, curves, subtitle):
  """The paper's two panels, each on its own y-scale: the loss against θ,
  the parents at θ = 0 and 1 (vertical lines), the better parent's loss
  (horizontal line) and the average θ = 0.5 (a dot)."""
  import matplotlib

  matplotlib.use('Agg')
  from matplotlib import figure as figure_lib

  from tff_algos.analysis import interpolation

  figure = figure_lib.Figure(figsize=(10, 4.2))
  axes = figure.subplots(1, len(curves), sharey=False)
  for ax, (case, curve) in zip(axes, curves.items()):
    ax.plot(
      curve.thetas, curve.losses, color='tab:blue', lw=1.5, marker='.', ms=4
    )
    for theta in (0.0, 1.0):
      ax.axvline(theta, color='gray', lw=0.8, ls='--')
    ax.axhline(
      curve.best_parent_loss,
      color='tab:red',
      lw=0.8,
      ls='-',
      label=f'best parent {curve.best_parent_loss:.4f}',
    )
    ax.plot(
      [0.5],
      [curve.loss_at(0.5)],
      'o',
      color='black',
      ms=5,
      label=f'θ = 0.5: {curve.loss_at(0.5):.4f}',
    )
    ax.set_xticks([-0.2, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2])
    ax.set_xlabel('mixing weight θ  (θ = 0: w′,  θ = 1: w)')
    ax.set_ylabel('loss (full MNIST training set)')
    ax.set_title(interpolation.TITLES[case])
    ax.legend(loc='best', fontsize=8)
    ax.grid(alpha=0.3)
  figure.suptitle(subtitle, fontsize=9)
  figure.tight_layout()
  _write_atomically(path, lambda temporary: figure.savefig(temporary, dpi=120))


def _print_settings(task, examples, holder, interpolation):
  """What the figure is of: the task, the paper's settings, ours."""
  print(f'{task.description}; training set: {examples:,} examples')
  print('settings from the paper:')
  for line in interpolation.FROM_PAPER:
    print(f'  - {line}')
  print('settings the paper does not state (chosen here):')
  for line in interpolation.CHOICES:
    print(f'  - {line}')
  print(
    f'seed {holder.seed}, {holder.points} evenly spaced θ in '
    f'[{interpolation.THETA_LOW}, {interpolation.THETA_HIGH}]',
    flush=True,
  )


def _print_table(curves):
  """Each curve's loss at θ = 0, 0.5 and 1 and its minimum."""
  print(
    f'{"case":12s} {"init seeds":>22s} {"θ=0 (w′)":>9s} '
    f'{"θ=0.5":>9s} {"θ=1 (w)":>9s} {"min":>9s} {"at θ":>7s}'
  )
  for case, curve in curves.items():
    theta_min, loss_min = curve.minimum
    seeds = '/'.join(str(s) for s in curve.initialization_seeds)
    print(
      f'{case:12s} {seeds:>22s} {curve.loss_at(0.0):9.4f} '
      f'{curve.loss_at(0.5):9.4f} {curve.loss_at(1.0):9.4f} '
      f'{loss_min:9.4f} {theta_min:7.3f}'
    )


def main(argv=None):
  argv = sys.argv if argv is None else argv
  if cli.wants_help(argv):
    print(_usage())
    return 0
  try:
    holder = _arguments(argv)
  except cli.UsageError as e:
    cli.fail(PROGRAM, e)
  started = time.process_time(), time.monotonic()
  from tff_algos import runtime

  runtime.prepare(start_worker=False)  # Faster imports; no TFF worker.
  import tasks
  from tff_algos.analysis import interpolation

  try:
    task = tasks.load_task(TASK, seed=holder.seed, data_dir=holder.data_dir)
    train_clients = tasks.client_arrays(task.train)
  except tasks.DataError as e:
    cli.fail(PROGRAM, e)
  examples = sum(len(c['y']) for c in train_clients)
  settings = interpolation.PAPER_SGD
  _print_settings(task, examples, holder, interpolation)
  curves = interpolation.interpolation_curves(
    task.model_fn,
    train_clients,
    holder.seed,
    holder.points,
    settings,
    on_progress=lambda text: print(text, flush=True),
  )
  _print_table(curves)
  subtitle = (
    f'MNIST 2NN, {settings.examples} examples each, SGD η = '
    f'{settings.learning_rate:g}, {settings.updates} updates of '
    f'B = {settings.batch_size}; loss over {examples:,} training '
    f'examples; seed {holder.seed}'
  )
  try:
    write_csv(holder.csv, curves)
    write_figure(holder.out, curves, subtitle)
  except OSError as e:
    cli.fail(
      PROGRAM,
      f'cannot write {e.filename or holder.out}: {e.strerror or e}',
      code=1,
    )
  cpu, wall = time.process_time() - started[0], time.monotonic() - started[1]
  print(f'{cpu:.1f} s CPU, {wall:.1f} s wall after parsing the flags')
  print(f'wrote {holder.out} and {holder.csv}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.exit_on_ctrl_c(PROGRAM, main))
