"""What a run's numbers come from besides its settings: the code, the
computation it trained with and the data. config.json records it
(`provenance`), so that a run folder knows its code, a changed model is
never taken for the same run, and runs of different code are never
averaged as seeds.

A record (`record`) holds content hashes only:
  package      SHA-256 of this package's source files (tff_algos/, tasks/,
               run_experiment.py), and for the reader its git commit and
               whether the package's files differ from it;
  modules      path → SHA-256 of every other module of the user's the
               process had loaded (the --import'ed file and whatever it
               imports from outside the Python installation);
  computation  SHA-256 of the learning process's round and its state's
               accessors, whatever shaped them (a data or config file the
               model reads, an environment variable, Keras's settings: what
               no list of files can name), independent of the names
               TensorFlow gives its functions (`runtime.fingerprint`);
  initial_state  SHA-256 of its `initialize`, apart because it holds the
               run's seed (a DP aggregator's noise seed is a constant of
               the initial state): seeds of one experiment differ there
               and nowhere else, and are averaged (`results.code_id`);
  data         SHA-256 of the task's client data as the run trains and
               evaluates on them;
  compiled_work  with compiled clients, SHA-256 of the TensorFlow graph
               of the work they train by (`simulation.compiled.Engine.
               fingerprint`),
               which the process's computations do not hold;
  execution    how the clients trained: compiled by XLA or per
               client.
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
import hashlib
import os
import subprocess
import sys
from typing import Any

import numpy as np

_ROOT = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
_PACKAGE_DIRS = ('tff_algos', 'tasks')
_PACKAGE_FILES = ('run_experiment.py',)
_SOURCE_SUFFIXES = ('.py', '.c')
# Modules TensorFlow writes as it traces (AutoGraph's conversions of the
# code above, which is recorded): new temporary files in every process.
_GENERATED = '__autograph_generated_file'


def _file_sha256(path):
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def _package_files():
  """The package's source files, relative to its root, sorted."""
  found = [
    name for name in _PACKAGE_FILES if os.path.isfile(os.path.join(_ROOT, name))
  ]
  for folder in _PACKAGE_DIRS:
    for parent, dirs, files in os.walk(os.path.join(_ROOT, folder)):
      dirs[:] = [d for d in dirs if d != '__pycache__']
      found += [
        os.path.relpath(os.path.join(parent, f), _ROOT)
        for f in files
        if f.endswith(_SOURCE_SUFFIXES)
      ]
  return sorted(found)


def _git(*args):
  try:
    result = subprocess.run(
      ['git', '-C', _ROOT, *args],
      capture_output=True,
      text=True,
      timeout=10,
      check=True,
    )
    return result.stdout
  except (OSError, subprocess.SubprocessError):
    return None


@functools.cache
def _git_commit():
  """(commit, whether the package's files differ from it), or (None, None)
  outside a git checkout. Read once: the commit a process runs is the one
  it started with."""
  commit = _git('rev-parse', 'HEAD')
  if not commit:
    return None, None
  status = _git('status', '--porcelain', '--', *_PACKAGE_DIRS, *_PACKAGE_FILES)
  return commit.strip(), None if status is None else bool(status.strip())


def package() -> dict[str, Any]:
  """The package's code: the SHA-256 of its source files (paths and
  contents), its git commit and whether its files differ from it."""
  digest = hashlib.sha256()
  for name in _package_files():
    digest.update(
      f'{name}\0{_file_sha256(os.path.join(_ROOT, name))}\n'.encode()
    )
  commit, modified = _git_commit()
  return dict(
    sha256=digest.hexdigest(), git_commit=commit, git_modified=modified
  )


def _installation():
  """The folders of the Python installation (standard library and
  site-packages of the interpreter and its virtual environment)."""
  return {
    os.path.realpath(p)
    for p in (
      sys.prefix,
      sys.base_prefix,
      sys.exec_prefix,
      sys.base_exec_prefix,
    )
  }


def _inside(path, folders):
  return any(path == f or path.startswith(f + os.sep) for f in folders)


def _realpath_by_parts():
  """`os.path.realpath` for the many files of a process's modules: each
  folder on their paths is resolved once, from its parent's resolution and
  a check whether it is a symbolic link (resolved whole if so), as
  `os.path.realpath` resolves a path's parts in order, with the same
  result. In a profile of an in-process run, `user_modules` took 0.47 s
  resolving each of ~5,000 module paths whole, and 0.14 s this way."""
  resolved = {}

  def realpath(path):
    if not os.path.isabs(path):
      path = os.path.join(os.getcwd(), path)
    real = resolved.get(path)
    if real is None:
      parent, name = os.path.split(path)
      if parent == path:  # The root.
        real = path
      elif name in ('', '.'):
        real = realpath(parent)
      elif name == '..':  # The parent of what the link led to.
        real = os.path.dirname(realpath(parent))
      else:
        real = os.path.join(realpath(parent), name)
        if os.path.islink(real):
          real = os.path.realpath(real)
      resolved[path] = real
    return real

  return realpath


def user_modules() -> dict[str, str]:
  """Absolute path → SHA-256 of every loaded module whose source is
  neither in the Python installation nor in this package: the user's."""
  installation = _installation()
  package_files = {os.path.join(_ROOT, n) for n in _PACKAGE_FILES}
  package_dirs = {os.path.join(_ROOT, d) for d in _PACKAGE_DIRS}
  realpath = _realpath_by_parts()
  found = {}
  for name, module in list(sys.modules.items()):
    if name.startswith(_GENERATED):
      continue
    path = getattr(module, '__file__', None)
    if not isinstance(path, str) or not path.endswith('.py'):
      continue
    path = realpath(path)
    if (
      _inside(path, installation)
      or _inside(path, package_dirs)
      or path in package_files
      or not os.path.isfile(path)
    ):
      continue
    found[path] = _file_sha256(path)
  return dict(sorted(found.items()))


def data_sha256(client_ids, train_arrays, test_arrays) -> str:
  """The SHA-256 of a task's client data: each client's id and arrays
  (names, dtypes, shapes, bytes), training then test."""
  digest = hashlib.sha256()
  for split, arrays in (('train', train_arrays), ('test', test_arrays)):
    for client, data in zip(client_ids, arrays or ()):
      digest.update(f'{split}\0{client}\n'.encode())
      for name, array in data.items():
        array = np.ascontiguousarray(array)
        digest.update(f'{name}\0{array.dtype.str}\0{array.shape}\n'.encode())
        digest.update(array.data)
  return digest.hexdigest()


def code(process) -> dict:
  """The code and computation of a learning process (an export's)."""
  from tff_algos.runtime import fingerprint

  return dict(
    package=package(),
    modules=user_modules(),
    computation=fingerprint.sha256(
      process.next,
      process.get_model_weights,
      process.set_model_weights,
      process.get_hparams,
      process.set_hparams,
    ),
    initial_state=fingerprint.sha256(process.initialize),
  )


def record(process, client_ids, train_arrays, test_arrays) -> dict:
  """The provenance of a run that trains `process` on these data."""
  return dict(
    code(process), data=data_sha256(client_ids, train_arrays, test_arrays)
  )


def _short(path):
  """A path as the user knows it: relative to the working folder if under
  it."""
  relative = os.path.relpath(path)
  return path if relative.startswith('..') else relative


def differences(
  saved: Mapping[str, Any], current: Mapping[str, Any]
) -> dict[str, str]:
  """What differs between two records, by part ('data', 'modules',
  'package', 'computation') → a phrase naming it; {} when none does."""
  found = {}
  if saved.get('data') != current.get('data'):
    found['data'] = "the task's data"
  before, now = saved.get('modules') or {}, current.get('modules') or {}
  changed = [p for p in now if p in before and before[p] != now[p]]
  added = [p for p in now if p not in before]
  removed = [p for p in before if p not in now]
  if changed or added or removed:
    parts = (
      [f'{_short(p)} changed' for p in changed]
      + [f'{_short(p)} is new' for p in added]
      + [f'{_short(p)} is no longer loaded' for p in removed]
    )
    found['modules'] = 'your code (' + ', '.join(parts) + ')'
  old = saved.get('package') or {}
  new = current.get('package') or {}
  if old.get('sha256') != new.get('sha256'):
    commits = ''
    if old.get('git_commit') and new.get('git_commit'):
      commits = (
        f': {old["git_commit"][:10]}'
        f'{"+changes" if old.get("git_modified") else ""} there, '
        f'{new["git_commit"][:10]}'
        f'{"+changes" if new.get("git_modified") else ""} here'
      )
    found['package'] = f"the package's code{commits}"
  computations = ('computation', 'initial_state', 'compiled_work')
  if (
    [saved.get(k) for k in computations]
    != [current.get(k) for k in computations]
  ) and not (found.keys() - {'data'}):
    found['computation'] = (
      "the learning process's computation, with the same code and "
      'settings: something the model or algorithm reads differs (a file, '
      "an environment variable, Keras's settings)"
    )
  return found
