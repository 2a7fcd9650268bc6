"""Exports an algorithm as serialized TFF computations for a production port.

  python -m tff_algos.export --algo=fedisgd --task=synthetic_1_1 --out=DIR \\
      [--epochs=20 --client_lr=0.01 --mu=1 ...] [--seed=0] [--overwrite]

Writes to DIR (which must be empty or new; --overwrite replaces an earlier
export there):
  initialize.pb, next.pb                   the learning process
  get_model_weights.pb, set_model_weights.pb, get_hparams.pb, set_hparams.pb
                                           its state accessors
  map_reduce_form/<part>.pb                its tff.backends.mapreduce.MapReduceForm
  distribute_aggregate_form/<part>.pb      its DistributeAggregateForm
  initial_model_weights.npz                the model it was built with (--seed):
                                           `initialize` draws a new random
                                           model on every call
  manifest.json                            versions, hyper-parameters, the
                                           client data contract, and part →
                                           file and type signature
Each .pb is a serialized `computation_pb2.Computation`; read one back with
`tff.framework.deserialize_computation(Computation.FromString(bytes))`
(docs/guide/porting.md, "Loading an export"). The production build (the default)
takes per client a tf.data.Dataset of the model's batches. The task gives
the model (its data are loaded for that). Bad flags: one line on stderr,
exit code 2.
"""

import dataclasses
import json
import os
import shutil
import sys
import tempfile

from tff_algos import cli
from tff_algos.simulation import run_dir
from tff_algos.simulation.config import ConfigError
from tff_algos.simulation.config import resolve
from tff_algos.simulation.declarations import SETTINGS

PROGRAM = 'python -m tff_algos.export'
GROUPS = ('algorithm', 'aggregation', 'data')
_OWN_FLAGS = (
  cli.Flag('DEFINE_string', 'out', None, 'The folder to write (empty or new).'),
  cli.Flag(
    'DEFINE_bool', 'overwrite', False, 'Replace an earlier export in --out.'
  ),
  cli.Flag(
    'DEFINE_integer',
    'seed',
    0,
    "Seed of the initial model weights written (as a run's --seed).",
  ),
  cli.Flag(
    'DEFINE_enum',
    'build',
    'production',
    'production: clients hold a tf.data.Dataset of batches '
    '(running --epochs passes); simulation: the scheduled client '
    'input of the simulation.',
    (['production', 'simulation'],),
  ),
  cli.Flag(
    'DEFINE_multi_string',
    'import',
    [],
    'A module or .py file registering a task or algorithm of your '
    'own (as for python -m tff_algos).',
  ),
)
DESCRIPTION = (
  "Write an algorithm's TFF computations (initialize, next) and "
  'the parts of their MapReduceForm and DistributeAggregateForm '
  'as serialized computations, with a manifest.json.'
)
# The parts of each form, as TFF 0.87 names them.
MAP_REDUCE_PARTS = (
  'prepare',
  'work',
  'zero',
  'accumulate',
  'merge',
  'report',
  'secure_sum_bitwidth',
  'secure_sum_max_input',
  'secure_modular_sum_modulus',
  'update',
)
DISTRIBUTE_AGGREGATE_PARTS = (
  'server_prepare',
  'server_to_client_broadcast',
  'client_work',
  'client_to_server_aggregation',
  'server_result',
)


def forms(process):
  """{form name: {part: computation}} of a learning process's `next`."""
  import tensorflow_federated as tff

  mapreduce = tff.backends.mapreduce
  map_reduce = mapreduce.get_map_reduce_form_for_computation(process.next)
  distribute_aggregate = (
    mapreduce.get_distribute_aggregate_form_for_computation(process.next)
  )
  return {
    'map_reduce_form': {p: getattr(map_reduce, p) for p in MAP_REDUCE_PARTS},
    'distribute_aggregate_form': {
      p: getattr(distribute_aggregate, p) for p in DISTRIBUTE_AGGREGATE_PARTS
    },
  }


MANIFEST = 'manifest.json'
WEIGHTS = 'initial_model_weights.npz'
ACCESSORS = (
  'get_model_weights',
  'set_model_weights',
  'get_hparams',
  'set_hparams',
)


def versions():
  """The versions the serialized computations are tied to."""
  import platform

  import tensorflow as tf
  import tensorflow_federated as tff

  return dict(
    python=platform.python_version(),
    tensorflow=tf.__version__,
    tensorflow_federated=tff.__version__,
  )


def write_weights(path, weights):
  """`tff.learning.models.ModelWeights` as an .npz: trainable_0, ...,
  non_trainable_0, ... in the model's variable order."""
  import numpy as np

  arrays = {
    f'{kind}_{i}': np.asarray(w)
    for kind in ('trainable', 'non_trainable')
    for i, w in enumerate(getattr(weights, kind))
  }
  with open(path, 'wb') as f:
    np.savez(f, **arrays)


def export(process, out, metadata, initial_weights=None):
  """Writes `process` (its computations, accessors and forms' parts),
  `initial_weights` (a `tff.learning.models.ModelWeights`, if given) and
  manifest.json (`metadata` plus what was written) as the folder `out`,
  all or nothing: built beside it, then renamed over it (`out`, if it
  exists, must be empty or hold an earlier export). Returns the manifest."""
  import tensorflow_federated as tff

  parts = {'initialize': process.initialize, 'next': process.next}
  parts.update({name: getattr(process, name) for name in ACCESSORS})
  for form, computations in forms(process).items():
    parts.update({f'{form}/{name}': c for name, c in computations.items()})
  manifest = dict(metadata, versions=versions(), computations={})
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  building = tempfile.mkdtemp(prefix='.export-', dir=parent)
  umask = os.umask(0)
  os.umask(umask)
  try:
    os.chmod(building, 0o777 & ~umask)  # mkdtemp's is 0700.
    for name, computation in parts.items():
      path = os.path.join(building, f'{name}.pb')
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, 'wb') as f:
        f.write(
          tff.framework.serialize_computation(computation).SerializeToString()
        )
      manifest['computations'][name] = dict(
        file=f'{name}.pb', type_signature=str(computation.type_signature)
      )
    if initial_weights is not None:
      write_weights(os.path.join(building, WEIGHTS), initial_weights)
    with open(os.path.join(building, MANIFEST), 'w') as f:
      json.dump(manifest, f, indent=2)
    if os.path.isdir(out):
      shutil.rmtree(out)  # Empty, or an earlier export (the caller checks).
    os.rename(building, out)
  except BaseException:
    shutil.rmtree(building, ignore_errors=True)
    raise
  return manifest


def check_holds_an_export(out):
  """UsageError unless the folder `out` holds an export and nothing else
  (its manifest, the files it lists, the weights)."""
  try:
    with open(os.path.join(out, MANIFEST)) as f:
      manifest = json.load(f)
    listed = {part['file'] for part in manifest['computations'].values()}
  except (OSError, ValueError, KeyError, TypeError, AttributeError):
    raise cli.UsageError(
      f'--out={out} holds files that are not an export '
      'of this command (no readable manifest.json); '
      'choose another folder'
    ) from None
  listed |= {MANIFEST, WEIGHTS}
  present = {
    os.path.relpath(os.path.join(root, name), out)
    for root, _, names in os.walk(out)
    for name in names
  }
  others = sorted(present - listed)
  if others:
    raise cli.UsageError(
      f'--out={out} holds files that are not part of its '
      f'export ({", ".join(others[:3])}); --overwrite '
      'replaces only an export: choose another folder'
    )


def _batch_shapes(element_spec):
  """'x: float32[B, 60], y: int32[B]' of a client dataset's element spec."""
  return ', '.join(
    f'{name}: {spec.dtype.name}[{", ".join(["B", *map(str, spec.shape)])}]'
    for name, spec in element_spec.items()
  )


def _settings(settings, production):
  """The algorithm's hyper-parameters and optimizers (with their learning
  rate schedules) in the computation, and the batch size the pipeline is
  to use (B is not part of a production build)."""
  entry = settings.entry
  simulation_only = {s.name for s in SETTINGS if s.simulation_only} | {
    h.name for h in entry.hparams if h.simulation_only
  }
  if production:
    simulation_only.add('batch_size')
  values = settings.to_json()
  if values['aggregator'] != 'dp' or production:
    simulation_only.add('seed')  # A simulation's DP noise seed.
  return {
    k: values[k]
    for k in (
      *entry.uses,
      *(h.name for h in entry.hparams),
      *(s.record_key for s in SETTINGS if s.in_computation),
    )
    if k in values
    and k not in simulation_only
    and values.get(k) not in (None, {})
  }


def _create(out):
  """Creates --out (before the work, so that whatever the OS refuses is
  one line now); whether it was created. UsageError on any OSError."""
  created = not os.path.isdir(out)
  try:
    os.makedirs(out, exist_ok=True)
  except OSError as e:
    raise cli.UsageError(f'--out={out}: {e.strerror or e}') from None
  return created


def _arguments(argv):
  """(flags, resolved settings, task) of the command line, with --out
  created; UsageError for bad input."""
  holder = cli.flag_values(GROUPS, _OWN_FLAGS)
  args, _ = cli.expand_flagfiles(argv[1:])
  imports = cli.import_modules(cli.imports_in(args))
  cli.parse(holder, args)
  out = holder.out
  if not out:
    raise cli.UsageError('--out is required: the folder to write')
  if os.path.isdir(out) and os.listdir(out):
    if not holder.overwrite:
      raise cli.UsageError(
        f'--out={out} is not empty (--overwrite '
        'replaces an earlier export there)'
      )
    check_holds_an_export(out)
  try:
    run_dir.check_usable(out, '--out')
  except run_dir.OutputDirError as e:
    raise cli.UsageError(str(e)) from None
  config = cli.config_from_flags(holder, imports)
  task = cli.load_task(config, cli.task_options(holder))
  try:
    settings = resolve(dataclasses.replace(config, task=task.name))
  except ConfigError as e:
    raise cli.UsageError(str(e)) from None
  return holder, settings, task


def _contract(process, settings, task, client_input, production):
  """The client data the exported `next` takes: its type and, in words,
  what a pipeline feeds it."""
  algorithm = settings.algorithm
  if production:
    contract = (
      "per client a tf.data.Dataset of the model's batches ("
      f'{_batch_shapes(task.train.element_type_structure)}); the pipeline '
      f'batches (the computation takes any B; B = {algorithm.batch_size} '
      f'in these settings) and the client makes {client_input.epochs} '
      'passes over its dataset; '
      + (
        'the server averages the updates with equal weights'
        if algorithm.client_weighting == 'uniform'
        else 'its update is weighted by its number of local examples (counted '
        'in its first pass)'
      )
    )
  else:
    contract = (
      'per client [OrderedDict(data, example_order, batch_ends)]: '
      "the simulation's scheduled input (tff_algos.simulation)"
    )
  return dict(
    type=str(process.next.type_signature.parameter[1].member), contract=contract
  )


def _round_callbacks(settings):
  """The algorithm's round callbacks (class → what it does), which are
  not in the computations."""
  return {
    type(c).__name__: ' '.join((type(c).__doc__ or '').split())
    for c in settings.entry.round_callbacks(settings.algorithm)
  }


def _manifest(process, settings, task, client_input, holder):
  """What manifest.json says besides the computations written."""
  from tff_algos.simulation import provenance

  production = holder.build == 'production'
  return dict(
    algorithm=settings.algo,
    paper=settings.entry.paper,
    build=holder.build,
    task=settings.run.task,
    model=task.description,
    hyperparameters=_settings(settings, production),
    client_data=_contract(process, settings, task, client_input, production),
    initial_model_weights=dict(
      file=WEIGHTS,
      seed=holder.seed,
      note='`initialize` draws a new random model on every call; '
      'start from these weights: state = set_model_weights('
      'initialize(), weights), weights = ModelWeights(trainable='
      '[trainable_0, ...], non_trainable=[...]) of the .npz',
    ),
    hparams_note='get_hparams(state) / set_hparams(state, hparams) '
    'read and change the hyper-parameters in the state '
    '(e.g. client_work/mu) between rounds',
    round_callbacks=_round_callbacks(settings),
    round_callbacks_note='what the simulation runs between rounds, '
    'outside the computations: a pipeline repeats '
    'those that change the state (set_hparams), '
    'the others only measure',
    provenance=provenance.code(process),
  )


def main(argv):
  if cli.wants_help(argv):
    print(cli.usage(PROGRAM, DESCRIPTION, GROUPS, _OWN_FLAGS))
    return 0
  try:
    holder, settings, task = _arguments(argv)
    out = holder.out
    created = _create(out)
  except cli.UsageError as e:
    cli.fail(PROGRAM, e)
  from tff_algos import learning
  from tff_algos import runtime
  from tff_algos.simulation import trainer

  runtime.start()  # TFF's own default context would leave a worker behind.
  client_input = (
    learning.DatasetInput(epochs=settings.algorithm.epochs or 1)
    if holder.build == 'production'
    else learning.ScheduledInput()
  )
  try:
    process = trainer.build_process(settings, task.model_fn, client_input)
    manifest = export(
      process,
      out,
      _manifest(process, settings, task, client_input, holder),
      learning.initial_model_weights(task.model_fn, holder.seed),
    )
  except OSError as e:
    cli.fail(PROGRAM, f'cannot write --out={out}: {e.strerror or e}')
  finally:
    runtime.stop()
    if created and os.path.isdir(out) and not os.listdir(out):
      os.rmdir(out)  # Nothing exported: nothing left behind.
  width = max(len(name) for name in manifest['computations'])
  for name, part in manifest['computations'].items():
    print(f'{name:{width}s}  {part["type_signature"]}')
  print(
    f'wrote {len(manifest["computations"])} computations, {WEIGHTS} '
    f'and {MANIFEST} to {out}',
    file=sys.stderr,
  )
  return 0


if __name__ == '__main__':
  sys.exit(cli.exit_on_ctrl_c(PROGRAM, main, sys.argv))
