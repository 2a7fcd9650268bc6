"""The bad-input corpus (tests/commands/test_bad_input_corpus.py) against
another checkout, as real processes: a seeded sample of PER_CLASS cases per
(entry point, class) of the bad cases (not those needing ../shared/data or
a non-root user), counting those that break the promise (one stderr line,
exit 2, nothing written). A case still running after TIMEOUT s accepted
the bad input ("ran") and is killed. Against ff5dc54 (the commit
the corpus's input checks branched from), 21 of a seeded 82-case sample
broke the promise (docs/guide/running.md).

  .venv/bin/python tools/bad_input_before.py THIS_CHECKOUT OTHER_CHECKOUT PER_CLASS OUT.json
"""

import collections
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile

main, root, per_class, out = (
  sys.argv[1],
  sys.argv[2],
  int(sys.argv[3]),
  sys.argv[4],
)
sys.path[:0] = [
  os.path.join(main, 'tests', 'commands'),
  os.path.join(main, 'tests'),
  main,
]
import test_bad_input_corpus as corpus  # noqa: E402

TIMEOUT = 40
classes = collections.defaultdict(list)
for case in corpus.CORPUS:
  if case.bad and not case.as_non_root and not case.needs_data:
    classes[(case.entry, case.kind.split('-')[0])].append(case)
rng = random.Random(0)
sample = [
  c
  for key in sorted(classes)
  for c in rng.sample(classes[key], min(per_class, len(classes[key])))
]
python = os.path.join(main, '.venv', 'bin', 'python')
commands = {
  'experiment': [python, os.path.join(root, 'run_experiment.py')],
  'export': [python, '-m', 'tff_algos.export'],
  'plot': [python, '-m', 'tff_algos.plot'],
  'worker': [python, '-m', 'tff_algos.worker'],
}
results = []
for case in sample:
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    folder = tmp / 'case'
    folder.mkdir()
    args = corpus._prepare(case, folder)
    before = corpus._snapshot(tmp)
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL='3')
    p = subprocess.Popen(
      commands[case.entry] + args,
      cwd=tmp,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      errors='replace',
      start_new_session=True,
    )
    try:
      _, err = p.communicate(timeout=TIMEOUT)
      code = p.returncode
    except subprocess.TimeoutExpired:
      os.killpg(p.pid, signal.SIGKILL)
      _, err = p.communicate()
      code = 'ran'
    for name in ('unreadable', 'unwritable'):
      (folder / name).chmod(0o755)
    lines = err.strip().splitlines()
    written = corpus._snapshot(tmp) != before
    ok = code == 2 and len(lines) == 1 and not written
    results.append(
      dict(
        id=case.id,
        entry=case.entry,
        kind=case.kind.split('-')[0],
        code=code,
        stderr_lines=len(lines),
        wrote=written,
        ok=ok,
        last=lines[-1][:200] if lines else '',
      )
    )
    print(
      ('ok  ' if ok else 'FAIL'), case.id, code, len(lines), written, flush=True
    )
json.dump(
  dict(
    root=root,
    per_class=per_class,
    classes={f'{e}/{k}': len(v) for (e, k), v in classes.items()},
    results=results,
  ),
  open(out, 'w'),
  indent=1,
)
print(f'{sum(not r["ok"] for r in results)} of {len(results)} failed')
