"""`python` for the tests' command lines, without paying TensorFlow's import
each time: about 5.5 of the ~9.5 CPU-seconds of a short run_experiment.py
run here is importing TensorFlow, TensorFlow Privacy and JAX.

`command(...)` is a drop-in for `[sys.executable, ...]` in a subprocess
call. It starts this file as a small launcher (the process the test
holds: its pid, pipes, exit code and signals). The launcher hands its
argv, cwd, environment and stdin/stdout/stderr to a zygote, a process of
the test process's that has imported those libraries and nothing of this
repository, which forks a child to run the command as a fresh
interpreter would: sys.path from the script and the request's PYTHONPATH,
argv, cwd, environment, signal handlers, exit code, atexit handlers. The
package, the user's modules and TFF are imported in the child, so an
edit between two commands is seen as with a fresh interpreter.

What differs from a fresh interpreter, and so stays with `sys.executable`:
- the child is not the launcher's descendant (the zygote's): a test that
  looks at the command's process tree (a subreaper, psutil's children);
- TensorFlow is imported before the command starts: a test of what the
  command imports, or of what TensorFlow prints on import;
- the interpreter's own options (-u, -X, -W): refused.
A SIGKILL to the launcher reaches the child through the zygote, which
kills it when the launcher's connection closes (milliseconds later).
tests/commands/test_warm_python.py compares the two on the same commands.
"""

import atexit
import ctypes
import io
import json
import os
import runpy
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
import types

HERE = os.path.abspath(__file__)
# What the zygote imports: the third-party libraries whose import is the
# cost, never this repository's code (its edits must reach the commands).
PRELOAD = ('tensorflow', 'tensorflow_privacy', 'jax', 'numpy', 'psutil')
# As tff_algos/logs.py sets them before TensorFlow's import; the commands'
# own environments then set them as theirs (TF reads its log level once).
PRELOAD_ENV = dict(
  TF_CPP_MIN_LOG_LEVEL='3',
  GRPC_ENABLE_FORK_SUPPORT='0',
  GRPC_VERBOSITY='ERROR',
)
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_ZYGOTE = {}  # pid → (Popen, socket name): one per test process.
_LOCK = threading.Lock()


def command(*args):
  """`[sys.executable, *args]` run through this test process's zygote
  (started on first use, stopped at exit)."""
  if args and args[0].startswith('-') and args[0] not in ('-m', '-c'):
    raise ValueError(f'warm python takes no interpreter option: {args[0]}')
  return [sys.executable, '-S', HERE, _zygote_socket(), *args]


def _zygote_socket():
  with _LOCK:
    if os.getpid() not in _ZYGOTE:
      # An abstract socket (Linux): no file to remove, however it ends.
      name = f'tff_algos_tests_warm_{os.getpid()}_{secrets.token_hex(8)}'
      env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
      zygote = subprocess.Popen(
        [sys.executable, HERE, '--serve', name],
        env=dict(env, **PRELOAD_ENV),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        # TensorFlow's import notes would land in whichever test's output
        # pytest captures; `python tests/warm.py --serve NAME` shows them.
        stderr=subprocess.DEVNULL,
      )
      if zygote.stdout.readline() != b'ready\n':
        raise RuntimeError(
          f'the warm python zygote did not start: run {HERE} --serve x'
        )
      _ZYGOTE[os.getpid()] = (zygote, name)
      atexit.register(_stop, zygote)
    return _ZYGOTE[os.getpid()][1]


def _stop(zygote):
  zygote.kill()
  zygote.wait()


# ---------------------------------------------------------------- launcher
def _launch(name, argv):
  """Runs argv in a child of the zygote listening at `name`; ends as the
  child did."""
  conn = socket.socket(socket.AF_UNIX)
  conn.connect('\0' + name)
  # Signals the launcher was started ignoring (as pytest-xdist's workers
  # ignore SIGINT): a fresh interpreter keeps ignoring them.
  ignored = [s for s in RELAYED if signal.getsignal(s) == signal.SIG_IGN]
  request = json.dumps(
    dict(
      argv=argv,
      cwd=os.getcwd(),
      env=dict(os.environ),
      group=os.getpgrp(),
      ignored=ignored,
    )
  )
  child, pending = None, []  # A signal before the child's pid: kept.

  def relay(sig, _):
    if child is None:
      pending.append(sig)
    else:
      os.kill(child, sig)

  for sig in set(RELAYED) - set(ignored):
    signal.signal(sig, relay)
  socket.send_fds(conn, [request.encode()], [0, 1, 2])
  reader = conn.makefile('r')
  child = int(reader.readline())
  for sig in pending:
    os.kill(child, sig)
  status = reader.readline()
  if not status:
    os._exit(255)  # The zygote died.
  status = int(status)
  if os.WIFSIGNALED(status):
    _die_of(os.WTERMSIG(status))
  os._exit(os.WEXITSTATUS(status))


def _die_of(sig):
  """Ends this process by `sig`, as its default action does."""
  signal.signal(sig, signal.SIG_DFL)
  os.kill(os.getpid(), sig)
  os._exit(128 + sig)  # Only if the signal is blocked: the shell's code.


# ------------------------------------------------------------------ zygote
def _serve(name):
  # Dies with its test process, however that ends (PR_SET_PDEATHSIG).
  ctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL)
  for module in PRELOAD:
    __import__(module)
  # A fresh interpreter's path after its first entry and PYTHONPATH's.
  base_path = [p for p in sys.path[1:] if p not in _pythonpath(os.environ)]
  listener = socket.socket(socket.AF_UNIX)
  listener.bind('\0' + name)
  listener.listen(16)
  wakeup_read, wakeup_write = os.pipe()
  os.set_blocking(wakeup_write, False)
  signal.set_wakeup_fd(wakeup_write)
  signal.signal(signal.SIGCHLD, lambda *_: None)
  selector = selectors.DefaultSelector()
  selector.register(listener, selectors.EVENT_READ)
  selector.register(wakeup_read, selectors.EVENT_READ)
  children = {}  # pid → the launcher's connection.
  own_fds = [listener.fileno(), wakeup_read, wakeup_write]
  sys.stdout.write('ready\n')
  sys.stdout.flush()
  while True:
    for key, _ in selector.select():
      if key.fileobj is listener:
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
          selector.close()
          for fd in own_fds + [c.fileno() for c in children.values()]:
            os.close(fd)
          _child(conn, json.loads(message), fds, base_path)
        for fd in fds:
          os.close(fd)
        conn.sendall(b'%d\n' % pid)
        children[pid] = conn
        selector.register(conn, selectors.EVENT_READ, pid)
      elif key.fileobj == wakeup_read:
        os.read(wakeup_read, 512)
        _reap(children, selector)
      else:  # The launcher closed its end: it was killed.
        _kill(key.data)
        selector.unregister(key.fileobj)


def _reap(children, selector):
  while children:
    pid, status = os.waitpid(-1, os.WNOHANG)
    if not pid:
      return
    conn = children.pop(pid)
    try:
      conn.sendall(b'%d\n' % status)
    except OSError:
      pass
    try:
      selector.unregister(conn)
    except (KeyError, ValueError):
      pass
    conn.close()


def _kill(pid):
  try:
    os.kill(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def _pythonpath(env):
  return [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]


def _child(conn, request, fds, base_path):
  """In the fork: becomes `python *argv` as a fresh interpreter would."""
  conn.close()
  for target, fd in enumerate(fds):
    os.dup2(fd, target)
    os.close(fd)
  env = request['env']
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(env)
  try:  # The launcher's process group, as its own child would be.
    os.setpgid(0, request['group'])
  except OSError:
    pass
  # Signal handlers as Python's start sets them from the launcher's.
  for sig in RELAYED:
    signal.signal(sig, signal.SIG_DFL)
  if signal.SIGINT not in request['ignored']:
    signal.signal(signal.SIGINT, signal.default_int_handler)
  for sig in request['ignored']:
    signal.signal(sig, signal.SIG_IGN)
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  signal.signal(signal.SIGPIPE, signal.SIG_IGN)
  signal.set_wakeup_fd(-1)
  _standard_streams(bool(env.get('PYTHONUNBUFFERED')))
  # The zygote's own main module (multiprocessing's alias of it too): a
  # fresh interpreter's main module is the command's.
  sys.modules.pop('__mp_main__', None)
  sys.modules['__main__'] = types.ModuleType('__main__')
  argv = request['argv']
  if argv[0] == '-m':
    first, sys.argv = os.getcwd(), [argv[1], *argv[2:]]
  elif argv[0] == '-c':
    first, sys.argv = '', ['-c', *argv[2:]]
  else:
    first = os.path.dirname(os.path.abspath(argv[0]))
    sys.argv = list(argv)
  sys.path[:] = [first, *_pythonpath(env), *base_path]
  os._exit(_run(argv))


def _standard_streams(unbuffered):
  def stream(fd, errors, line_buffering):
    raw = io.FileIO(fd, 'r' if fd == 0 else 'w', closefd=False)
    if fd == 0:
      buffered = io.BufferedReader(raw)
    else:
      buffered = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(
      buffered,
      encoding='utf-8',
      errors=errors,
      line_buffering=line_buffering,
      write_through=unbuffered and fd != 0,
    )

  sys.stdin = sys.__stdin__ = stream(0, 'strict', False)
  sys.stdout = sys.__stdout__ = stream(1, 'strict', os.isatty(1))
  sys.stderr = sys.__stderr__ = stream(2, 'backslashreplace', True)


def _run(argv):
  """Runs the command; its exit code as the interpreter's would be."""
  try:
    if argv[0] == '-m':
      runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    elif argv[0] == '-c':
      main = sys.modules['__main__'].__dict__
      exec(compile(argv[1], '<string>', 'exec'), main)
    else:
      runpy.run_path(argv[0], run_name='__main__')
    code = 0
  except SystemExit as e:
    code = _exit_code(e.code)
  except KeyboardInterrupt as e:  # The interpreter dies of the signal.
    _print_traceback(e)
    _finish()
    _die_of(signal.SIGINT)
  except BaseException as e:  # noqa: BLE001 (as the interpreter reports it)
    _print_traceback(e)
    code = 1
  _finish()
  return code


def _print_traceback(error):
  """The traceback from the command's first frame, as the interpreter
  prints it (without this file's and runpy's frames)."""
  tb = error.__traceback__
  while tb and tb.tb_frame.f_code.co_filename in (HERE, runpy.__file__):
    tb = tb.tb_next
  traceback.print_exception(type(error), error, tb)


def _exit_code(code):
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  print(code, file=sys.stderr)
  return 1


def _finish():
  """What the interpreter does at exit: join threads, atexit, flush."""
  threading._shutdown()  # noqa: SLF001
  atexit._run_exitfuncs()  # noqa: SLF001
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass


if __name__ == '__main__':
  if sys.argv[1] == '--serve':
    _serve(sys.argv[2])
  else:
    _launch(sys.argv[1], sys.argv[2:])
