"""The edit corpus of tests/runtime/test_edit_corpus.py against any checkout:
for each edit a researcher makes between two runs that share a computation
cache folder, whether the run after the edit gives the metrics.csv of a
run with the cache off ("same"), another one ("WRONG": a stale result), or
fails (its last line).

  .venv/bin/python tools/edit_corpus_before.py --checkout=/path/to/old --checkout=.

Each checkout runs as `python -m tff_algos` with PYTHONPATH at it, from a
folder of the user's own (a task whose model comes from two modules of
theirs and a config file), with a fresh shared cache per checkout.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The package first: tests/tasks (the tests of tasks) is not `tasks`.
sys.path[:0] = [
  _ROOT,
  os.path.join(_ROOT, 'tests'),
  os.path.join(_ROOT, 'tests', 'runtime'),
]
import test_edit_corpus as corpus  # noqa: E402


def _run(checkout, folder, out, env, cache_on):
  env = dict(
    env,
    PYTHONPATH=os.path.abspath(checkout),
    TFF_ALGOS_COMPUTATION_CACHE='1' if cache_on else '0',
  )
  result = subprocess.run(
    [
      sys.executable,
      '-m',
      'tff_algos',
      f'--import={folder}/my_task.py',
      *corpus.RUN,
      f'--output_dir={out}',
    ],
    cwd=folder,
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
  )
  if result.returncode:
    lines = result.stderr.strip().splitlines()
    return None, f'exit {result.returncode}, {len(lines)} lines: ' + (
      lines[-1][:90] if lines else ''
    )
  with open(os.path.join(out, 'metrics.csv'), 'rb') as f:
    return f.read(), None


def _case(checkout, edit, work, cache):
  folder = os.path.join(work, 'mine')
  os.makedirs(folder)
  for name, text in corpus.FILES.items():
    with open(os.path.join(folder, name), 'w') as f:
      f.write(textwrap.dedent(text).lstrip())
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  env['TFF_ALGOS_CACHE'] = cache
  _run(checkout, folder, os.path.join(work, 'before'), env, True)
  env = corpus.COMMAND_LINE_EDITS[edit](_Path(folder), env)
  cached, failed = _run(
    checkout, folder, os.path.join(work, 'cached'), env, True
  )
  if failed:
    return failed
  off, failed = _run(checkout, folder, os.path.join(work, 'off'), env, False)
  if failed:
    return f'cache off: {failed}'
  return 'same' if cached == off else 'WRONG (differs from cache off)'


class _Path(str):
  """The folder as the corpus's edits take it (`folder / name`)."""

  def __truediv__(self, name):
    return _File(os.path.join(self, name))


class _File(str):
  def read_text(self):
    with open(self) as f:
      return f.read()

  def write_text(self, text):
    with open(self, 'w') as f:
      f.write(text)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--checkout', action='append', required=True)
  parser.add_argument(
    '--only',
    action='append',
    default=[],
    help='run the edits whose name contains this (repeatable; default: all)',
  )
  args = parser.parse_args()
  edits = [
    edit
    for edit in corpus.COMMAND_LINE_EDITS
    if not args.only or any(part in edit for part in args.only)
  ]
  table = {}
  for checkout in args.checkout:
    cache = tempfile.mkdtemp(prefix='edit_corpus_cache_')
    for edit in edits:
      work = tempfile.mkdtemp(prefix='edit_corpus_')
      try:
        table.setdefault(edit, []).append(_case(checkout, edit, work, cache))
      finally:
        shutil.rmtree(work, ignore_errors=True)
      print(f'{checkout}: {edit}: {table[edit][-1]}', file=sys.stderr)
    shutil.rmtree(cache, ignore_errors=True)
  print('| edit | ' + ' | '.join(args.checkout) + ' |')
  print('|---|' + '---|' * len(args.checkout))
  for edit, outcomes in table.items():
    print(f'| {edit} | ' + ' | '.join(outcomes) + ' |')


if __name__ == '__main__':
  main()
