"""Starts a TFF worker for `run_experiment.py --workers=...` (README: Remote workers).

  python -m tff_algos.worker --port=8000              # loopback only
  python -m tff_algos.worker --port=8000 --listen_all # every interface (unsafe)

Runs TFF's C++ `worker_binary` in the foreground (this process becomes it:
stop it with Ctrl-C or `kill PID`). By default it accepts connections from
this machine only (the same LD_PRELOAD bind() shim as the local runtime), so
another machine reaches it through an SSH tunnel:
  ssh -N -L 8000:127.0.0.1:8000 user@worker-host   # on the coordinator
  python run_experiment.py --workers=127.0.0.1:8000,...
TFF's executor protocol has no authentication and no encryption: whoever
reaches the port can run any TensorFlow computation, i.e. code, as this
user. `--listen_all` exposes it to every network this machine is on.
Imports no TensorFlow: starts in well under a second.
"""

import argparse
import os
import socket
import sys

from tff_algos import cli
from tff_algos.runtime import allocator
from tff_algos.runtime import loopback

_WARNING = (
    'WARNING: --listen_all: this TFF worker listens on ALL network '
    'interfaces, port {port}. TFF\'s executor protocol has no authentication '
    'and no encryption: anyone who can reach this port can run arbitrary '
    'TensorFlow computations (code execution as user {user}) and read the '
    'data sent to it. Use it only on a private network you trust, behind a '
    'firewall that admits the coordinator alone; prefer the default '
    '(loopback) and an SSH tunnel.')


def _port(text):
  if not text.isdigit() or not 0 < int(text) < 65536:
    raise argparse.ArgumentTypeError(f'{text!r} is not a port (1-65535)')
  return int(text)


def main(argv=None):
  parser = cli.ArgumentParser(
      prog='python -m tff_algos.worker',
      description='Start a TFF worker_binary for run_experiment.py '
      '--workers (loopback only unless --listen_all).')
  parser.add_argument('--port', type=_port, required=True,
                      help='TCP port to serve on.')
  parser.add_argument('--listen_all', action='store_true',
                      help='Listen on all network interfaces (the protocol '
                      'is unauthenticated and unencrypted; prints a warning).')
  parser.add_argument('--max_concurrent_computation_calls', type=int,
                      default=-1, help='Passed to worker_binary: parallel '
                      'client computations at most (<= 0: no limit).')
  args = parser.parse_args(argv)
  try:  # worker_binary would keep running without serving on a busy port.
    probe, wildcard = socket.socket(socket.AF_INET6), '::'  # v4 and v6.
  except OSError:  # No IPv6 here.
    probe, wildcard = socket.socket(), ''
  with probe:
    try:
      probe.bind((wildcard, args.port))
    except OSError as e:
      parser.error(f'port {args.port} is not free: {e.strerror}')
  binary = loopback.worker_binary()
  command = [binary, f'--port={args.port}',
             f'--max_concurrent_computation_calls='
             f'{args.max_concurrent_computation_calls}']
  env = allocator.child_env(os.environ)  # Two malloc arenas per core.
  if args.listen_all:
    user = os.environ.get('USER') or str(os.getuid())
    print(_WARNING.format(port=args.port, user=user), file=sys.stderr)
    where = f'all interfaces, port {args.port}'
  else:
    try:
      env = loopback.preload_env(env, loopback.loopback_shim())
    except loopback.ShimUnavailable as e:
      parser.error(f'{e}; refusing to listen on all interfaces without '
                   '--listen_all')
    where = f'127.0.0.1:{args.port} (loopback only)'
  print(f'TFF worker (pid {os.getpid()}) on {where}', file=sys.stderr,
        flush=True)
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.execve(binary, command, env)


if __name__ == '__main__':
  main()
