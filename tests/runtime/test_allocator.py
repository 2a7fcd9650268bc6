"""Two malloc arenas per core, in our process and in its TFF worker."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from tff_algos.runtime import allocator

REPO = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)

# Threads alive at once that each allocate (a new thread's first malloc
# takes a new arena while there are fewer than the limit; an ended thread's
# arena is reused), then glibc's per-arena statistics.
_THREADS_THEN_ARENAS = """
import ctypes, sys, threading
from tff_algos import runtime
from tff_algos.runtime import allocator
if sys.argv[1] == 'prepare':
  runtime.prepare(start_worker=False)
count = 3 * allocator.arenas()  # Below glibc's 8 × cores, above ours.
blocks, all_allocated = [], threading.Barrier(count)
def allocate():
  blocks.append(bytearray(100_000))
  all_allocated.wait()
threads = [threading.Thread(target=allocate) for _ in range(count)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()  # One 'Arena N:' block each, on stderr.
"""


def _arenas(mode, **env):
  result = subprocess.run(
    [sys.executable, '-c', _THREADS_THEN_ARENAS, mode],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=60,
    env={**{k: v for k, v in os.environ.items() if k != allocator.ENV}, **env},
    check=True,
  )
  return sum(line.startswith('Arena ') for line in result.stderr.splitlines())


@pytest.mark.fast
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc')
def test_prepare_limits_this_process_to_two_arenas_per_core():
  assert _arenas('plain') > allocator.arenas()  # glibc's up to 8 × cores.
  assert _arenas('prepare') == allocator.arenas()
  # A user's $MALLOC_ARENA_MAX is glibc's to apply, and stays.
  assert _arenas('prepare', MALLOC_ARENA_MAX='3') == 3


_PREPARE_THEN_PRINT_WORKER = """
from tff_algos import runtime
runtime.prepare()
from tff_algos.runtime import prestart
print(prestart._PRESTARTED.process.pid, flush=True)
import sys
sys.stdin.read()
"""


@pytest.mark.parametrize('user_setting', [None, '5'])
def test_the_worker_gets_two_arenas_per_core_unless_the_user_says(user_setting):
  env = {k: v for k, v in os.environ.items() if k != allocator.ENV}
  if user_setting:
    env[allocator.ENV] = user_setting
  process = subprocess.Popen(
    [sys.executable, '-c', _PREPARE_THEN_PRINT_WORKER],
    cwd=REPO,
    env=env,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    worker = psutil.Process(int(process.stdout.readline()))
    deadline = time.monotonic() + 30
    while 'worker_binary' not in ' '.join(worker.cmdline()):
      assert time.monotonic() < deadline  # Between fork and exec.
      time.sleep(0.05)
    assert worker.environ()[allocator.ENV] == (
      user_setting or str(allocator.arenas())
    )
  finally:
    process.communicate('', timeout=60)
