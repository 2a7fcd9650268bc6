"""Start-up: from process start to the end of the first round, by phase.

  .venv/bin/python benchmarks/startup.py [--tasks=synthetic_1_1,mnist_iid_2nn]
      [--data_dir=../shared/data] [--repeat=2] [--rounds=1]
      [--checkout=DIR ...] [--json=PATH]

For each task, runs `run_experiment.py` of each --checkout (default: this
one; give two, e.g. --checkout=/work/base --checkout=., to compare versions
in one run, interleaved) twice in new processes: "cold", with an empty
computation cache ($TFF_ALGOS_CACHE set to a new folder), then "warm",
the same command again (the next run of a sweep, or a re-run) with that
cache; and before, between and after those runs a bare
`python -c 'import tensorflow_federated'` (their median is the reference):
the targets are ratios to it
(the end of round 1 within 1.6x cold, within 1.3x warm). Each run
goes through `startup_probe.py`, which marks the ends of the phases from
inside the process (see there): imports (TensorFlow, then TFF and what it
pulls in, then the rest up to the data), data loading, the in-process
evaluation's model and tracing, the learning process's computations
(tracing, or a cache hit), the first TFF call (initialize and
set_model_weights, which waits for the worker if it is not listening yet),
the first evaluation (round 0) and the first round; and when the worker
was spawned and started listening. Memory: the peak RSS (VmHWM) of the
Python process and of the TFF worker, and at the end of round 1 what holds
it (anonymous memory vs mapped files: libraries). The 1-minute load
average is printed at the start and end of every run.

Tasks: `synthetic_1_1` runs the default experiment (FedProx μ = 1, K = 10,
E = 20, B = 10); `mnist_iid_2nn` and `mnist_iid_cnn` run FedAvg with E = 1,
B = 10, η = 0.05 (FedAvg's 2NN/CNN settings), reading --data_dir.
"""

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, 'startup_probe.py')
TASK_FLAGS = {
  'synthetic_1_1': ['--algo=fedprox'],
  'mnist_iid_2nn': [
    '--algo=fedavg',
    '--task=mnist_iid_2nn',
    '--epochs=1',
    '--batch_size=10',
    '--client_lr=0.05',
  ],
  'mnist_iid_cnn': [
    '--algo=fedavg',
    '--task=mnist_iid_cnn',
    '--epochs=1',
    '--batch_size=10',
    '--client_lr=0.05',
  ],
}
# (label, the mark that ends the phase); a phase starts where the previous
# one that happened ended.
PHASES = (
  ('import TensorFlow', 'import tensorflow'),
  ('import TFF (and what it pulls in)', 'import tensorflow_federated'),
  ('data loading (and other imports)', 'data loaded'),
  ('evaluation: model + tracing', 'evaluation built'),
  ('computations: tracing or cache', 'computations built'),
  ('first call (initialize)', 'first call'),
  ('first evaluation (round 0)', 'round 0'),
  ('first round', 'round 1'),
)


def load():
  return os.getloadavg()[0]


def environment(checkout, cache_dir):
  env = dict(os.environ)
  env.update(
    TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=checkout, TFF_ALGOS_CACHE=cache_dir
  )
  return env


def bare_import(python, checkout):
  """(seconds, CPU seconds, peak RSS in KB) of `python -c 'import
  tensorflow_federated'`, process start to exit."""
  start = time.time()
  result = subprocess.run(
    [
      python,
      '-c',
      'import tensorflow_federated, resource, time; '
      'print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, '
      'time.process_time())',
    ],
    env=environment(checkout, '/nonexistent'),
    cwd=checkout,
    capture_output=True,
    text=True,
    check=True,
  )
  rss, cpu = result.stdout.split()[-2:]
  return time.time() - start, float(cpu), int(rss)


def run(python, checkout, task, data_dir, rounds, cache_dir, out_dir):
  """One probed run_experiment.py; the probe's record plus the wall time."""
  timeline = os.path.join(out_dir, 'timeline.json')
  args = [
    python,
    PROBE,
    timeline,
    os.path.join(checkout, 'run_experiment.py'),
    *TASK_FLAGS[task],
    f'--rounds={rounds}',
    '--progress=false',
    f'--output_dir={os.path.join(out_dir, "run")}',
  ]
  if task.startswith('mnist'):
    args.append(f'--data_dir={data_dir}')
  env = environment(checkout, cache_dir)
  start = time.time()
  env['STARTUP_PROBE_T0'] = repr(start)
  result = subprocess.run(
    args, env=env, cwd=checkout, capture_output=True, text=True
  )
  if result.returncode:
    sys.exit(
      f'{" ".join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}'
    )
  with open(timeline) as f:
    record = json.load(f)
  record['wall'] = time.time() - start
  record['t0'] = start
  return record


def phases(record):
  """{phase label: seconds}, plus 'total to round 1' and worker timings."""
  t0, marks = record['t0'], dict(record['marks'])
  result, previous = collections.OrderedDict(), t0
  for label, end in PHASES:
    if end in marks:
      result[label] = marks[end] - previous
      previous = marks[end]
  result['= process start to end of round 1'] = marks['round 1'] - t0
  if 'worker spawned' in marks:
    result['worker spawned at'] = marks['worker spawned'] - t0
  if 'worker listening' in marks:
    result['worker listening at'] = marks['worker listening'] - t0
    result['worker start (spawn to listening)'] = (
      marks['worker listening'] - marks['worker spawned']
    )
  return result


def memory_row(record):
  values = record['values']
  worker_peak = max(
    [w.get('VmHWM', 0) for w in values['worker_at_stop']] or [0]
  )
  python = values['exit_python']
  at_round = values.get('round_1_python', {})
  worker = values.get('round_1_worker', {})
  return collections.OrderedDict(
    python_peak_mb=python.get('VmHWM', 0) / 1024,
    worker_peak_mb=worker_peak / 1024,
    tree_peak_mb=(python.get('VmHWM', 0) + worker_peak) / 1024,
    python_anon_mb=at_round.get('RssAnon', 0) / 1024,
    python_file_mb=at_round.get('RssFile', 0) / 1024,
    worker_anon_mb=worker.get('RssAnon', 0) / 1024,
    worker_file_mb=worker.get('RssFile', 0) / 1024,
    modules=values.get('modules'),
    heavy_modules_loaded=','.join(values.get('modules_loaded', [])),
  )


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tasks', default='synthetic_1_1,mnist_iid_2nn')
  parser.add_argument('--data_dir', default=os.environ.get('TFF_DATA_DIR'))
  parser.add_argument('--repeat', type=int, default=1)
  parser.add_argument('--rounds', type=int, default=1)
  parser.add_argument(
    '--checkout',
    action='append',
    default=None,
    help='repository checkouts to run (default: this one)',
  )
  parser.add_argument(
    '--python',
    default=None,
    help='interpreter (default: CHECKOUT/.venv/bin/python)',
  )
  parser.add_argument('--json', default=None)
  args = parser.parse_args()
  checkouts = [
    os.path.abspath(c) for c in (args.checkout or [os.path.dirname(HERE)])
  ]
  data_dir = os.path.abspath(args.data_dir) if args.data_dir else None
  tasks = args.tasks.split(',')
  for task in tasks:
    if task not in TASK_FLAGS:
      sys.exit(f'unknown task {task}; known: {", ".join(TASK_FLAGS)}')
  results = []
  scratch = tempfile.mkdtemp(prefix='startup_')
  try:
    for repeat in range(args.repeat):
      for task in tasks:
        for checkout in checkouts:
          python = args.python or os.path.join(
            checkout, '.venv', 'bin', 'python'
          )
          load_before = load()
          bares = [bare_import(python, checkout)]
          cache_dir = tempfile.mkdtemp(dir=scratch, prefix='cache_')
          entry = dict(
            task=task,
            checkout=checkout,
            repeat=repeat,
            load_at_start=load_before,
          )
          for kind in ('cold', 'warm'):
            out_dir = tempfile.mkdtemp(dir=scratch, prefix=f'{kind}_')
            record = run(
              python, checkout, task, data_dir, args.rounds, cache_dir, out_dir
            )
            entry[kind] = dict(
              phases=phases(record),
              memory=memory_row(record),
              wall=record['wall'],
              marks=record['marks'],
              memory_at_marks=record['values'].get('memory_at_marks', {}),
              cpu_to_round_1=record['values']
              .get('cpu_at_marks', {})
              .get('round 1'),
            )
            shutil.rmtree(out_dir, ignore_errors=True)
            # The bare import before, between and after the runs: the
            # median of the three is the reference.
            bares.append(bare_import(python, checkout))
          entry.update(
            bare_imports_s=[b[0] for b in bares],
            bare_import_s=statistics.median(b[0] for b in bares),
            bare_import_cpu_s=statistics.median(b[1] for b in bares),
            bare_import_peak_mb=max(b[2] for b in bares) / 1024,
          )
          entry['load_at_end'] = load()
          results.append(entry)
          report(entry)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  if len(results) > 1:
    summary(results)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)


def report(entry):
  bare = entry['bare_import_s']
  print(
    f'\n{entry["task"]} — {entry["checkout"]} (load '
    f'{entry["load_at_start"]:.1f}→{entry["load_at_end"]:.1f}); bare '
    f'`import tensorflow_federated`: {bare:.2f} s (median of '
    f'{", ".join(f"{b:.2f}" for b in entry["bare_imports_s"])}), peak '
    f'{entry["bare_import_peak_mb"]:.0f} MB'
  )
  print(f'{"seconds":42s} {"cold":>8s} {"warm":>8s}')
  cold, warm = entry['cold']['phases'], entry['warm']['phases']
  at_marks = entry['cold'].get('memory_at_marks', {})
  ends = dict(PHASES)
  for label in cold:
    held = at_marks.get(ends.get(label), {})
    held = (
      f'   RSS {held["VmRSS"] / 1024:5.0f} MB (anon '
      f'{held["RssAnon"] / 1024:4.0f}, peak {held["VmHWM"] / 1024:5.0f})'
      if held.get('VmRSS')
      else ''
    )
    print(
      f'  {label:40s} {cold[label]:8.2f} '
      f'{warm.get(label, float("nan")):8.2f}{held}'
    )
  total = '= process start to end of round 1'
  print(
    f'  {"ratio to the bare import":40s} {cold[total] / bare:7.2f}x '
    f'{warm[total] / bare:7.2f}x'
  )
  bare_cpu = entry['bare_import_cpu_s']
  cold_cpu, warm_cpu = (entry[k]['cpu_to_round_1'] for k in ('cold', 'warm'))
  if cold_cpu and warm_cpu:
    print(
      f'  {"Python CPU-s to round 1 (bare: " + f"{bare_cpu:.2f})":40s} '
      f'{cold_cpu:8.2f} {warm_cpu:8.2f}'
    )
    print(
      f'  {"  ratio to the bare import, CPU":40s} '
      f'{cold_cpu / bare_cpu:7.2f}x {warm_cpu / bare_cpu:7.2f}x'
    )
  print(
    f'  {"process wall (to exit)":40s} {entry["cold"]["wall"]:8.2f} '
    f'{entry["warm"]["wall"]:8.2f}'
  )
  for key in entry['cold']['memory']:
    c, w = entry['cold']['memory'][key], entry['warm']['memory'][key]
    fmt = (
      (lambda v: f'{v:8.0f}')
      if isinstance(c, float)
      else (lambda v: f'{v!s:>8s}')
    )
    print(f'  {key:40s} {fmt(c)} {fmt(w)}')


def summary(results):
  print('\nmedians over repeats: ratio of the first round to the bare import')
  groups = collections.defaultdict(list)
  for entry in results:
    groups[entry['task'], entry['checkout']].append(entry)
  total = '= process start to end of round 1'
  for (task, checkout), entries in groups.items():
    cold = statistics.median(
      e['cold']['phases'][total] / e['bare_import_s'] for e in entries
    )
    warm = statistics.median(
      e['warm']['phases'][total] / e['bare_import_s'] for e in entries
    )
    tree = statistics.median(
      e['cold']['memory']['tree_peak_mb'] for e in entries
    )
    print(
      f'  {task:16s} {checkout:24s} cold {cold:.2f}x  warm {warm:.2f}x  '
      f'tree peak {tree:.0f} MB'
    )


if __name__ == '__main__':
  main()
