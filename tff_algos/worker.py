"""Starts a TFF worker for `run_experiment.py --workers=...`
(docs/guide/remote-workers.md).

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
A port another process listens on is refused (one line, exit code 2); a
killed worker's port is free again at once. Imports no TensorFlow: starts
in well under a second.
"""

import os
import socket
import sys

from tff_algos import cli
from tff_algos.runtime import allocator
from tff_algos.runtime import loopback

_WARNING = (
  'WARNING: --listen_all: this TFF worker listens on ALL network '
  "interfaces, port {port}. TFF's executor protocol has no authentication "
  'and no encryption: anyone who can reach this port can run arbitrary '
  'TensorFlow computations (code execution as user {user}) and read the '
  'data sent to it. Use it only on a private network you trust, behind a '
  'firewall that admits the coordinator alone; prefer the default '
  '(loopback) and an SSH tunnel.'
)


PROGRAM = 'python -m tff_algos.worker'
DESCRIPTION = (
  'Start a TFF worker_binary for run_experiment.py --workers '
  '(loopback only unless --listen_all).'
)
_FLAGS = (
  cli.Flag('DEFINE_integer', 'port', None, 'TCP port to serve on (1-65535).'),
  cli.Flag(
    'DEFINE_bool',
    'listen_all',
    False,
    'Listen on all network interfaces (the protocol is '
    'unauthenticated and unencrypted; prints a warning).',
  ),
  cli.Flag(
    'DEFINE_integer',
    'max_concurrent_computation_calls',
    -1,
    'Passed to worker_binary: parallel client computations at most '
    '(<= 0: no limit).',
  ),
)


def _port(holder):
  """The --port to serve on; UsageError unless it is a free port."""
  port = holder.port
  if port is None:
    raise cli.UsageError('--port is required: the TCP port to serve on')
  if not 0 < port < 65536:
    raise cli.UsageError(f'--port must be in 1-65535, got {port}')
  try:  # worker_binary would keep running without serving on a busy port.
    probe, wildcard = socket.socket(socket.AF_INET6), '::'  # v4 and v6.
  except OSError:  # No IPv6 here.
    probe, wildcard = socket.socket(), ''
  with probe:
    # As worker_binary binds (gRPC sets SO_REUSEADDR, strace shows): a
    # port with only a killed worker's TIME-WAIT connections is free, one
    # a live process listens on is not. Not SO_REUSEPORT, which gRPC also
    # sets: with it a second worker would share a live one's port.
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind((wildcard, port))
    except OSError as e:
      raise cli.UsageError(f'port {port} is not free: {e.strerror}') from None
  return port


def main(argv=None):
  """The command line `argv` (the arguments after the program)."""
  argv = sys.argv[1:] if argv is None else list(argv)
  if cli.wants_help(['', *argv]):
    print(cli.usage(PROGRAM, DESCRIPTION, (), _FLAGS))
    return
  holder = cli.flag_values((), _FLAGS)
  try:
    args, _ = cli.expand_flagfiles(argv)
    cli.parse(holder, args)
    port = _port(holder)
    binary = loopback.worker_binary()
    env = allocator.child_env(os.environ)  # Two malloc arenas per core.
    if holder.listen_all:
      user = os.environ.get('USER') or str(os.getuid())
      print(_WARNING.format(port=port, user=user), file=sys.stderr)
      where = f'all interfaces, port {port}'
    else:
      try:
        env = loopback.preload_env(env, loopback.loopback_shim())
      except loopback.ShimUnavailable as e:
        raise cli.UsageError(
          f'{e}; refusing to listen on all interfaces without --listen_all'
        ) from None
      where = f'127.0.0.1:{port} (loopback only)'
  except cli.UsageError as e:
    cli.fail(PROGRAM, e)
  command = [
    binary,
    f'--port={port}',
    f'--max_concurrent_computation_calls='
    f'{holder.max_concurrent_computation_calls}',
  ]
  print(
    f'TFF worker (pid {os.getpid()}) on {where}', file=sys.stderr, flush=True
  )
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.execve(binary, command, env)


if __name__ == '__main__':
  # Ctrl-C before worker_binary takes over (building the loopback shim can
  # take seconds): one line and exit code 130, as the run's. SIGINT is not
  # taken when it came ignored: a worker started in the background of a
  # script lives on when the script is interrupted.
  cli.exit_on_ctrl_c(PROGRAM, main)
