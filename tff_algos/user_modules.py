"""Users' modules: the tasks and algorithms of your own that `--import`
makes known to every command (no TensorFlow).

A .py file is imported as Python imports a script's siblings: its folder
importable (a file inside a package, by its dotted name, the package's
root importable); a module name from the working folder first. config.json
records each as an absolute file path (or, for a module installed in
Python, its name), so that resuming, every run of a sweep, the plots and
the export find it again from any folder.
"""

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys


class ImportFailed(ValueError):
  """A user's module cannot be imported (one line says why)."""


def import_modules(specs) -> tuple[str, ...]:
  """Imports users' modules that register tasks or algorithms, as Python
  imports them: a .py file with its folder importable for its siblings (a
  file inside a package, under its dotted name with the package's root
  importable), a module name from the working folder first. Returns them
  as config.json records them, so that any command finds them again from
  any folder: as absolute file paths, but for modules installed in Python
  (by name). ImportFailed, one line, if one cannot be imported."""
  imported = []
  for spec in specs:
    if spec.endswith('.py') or os.sep in spec:
      path = os.path.abspath(spec)
      if not os.path.isfile(path):
        raise ImportFailed(f'--import={spec}: no such file')
      _import_file(spec, path)
      imported.append(path)
    else:
      if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
      _exec(spec, lambda: importlib.import_module(spec))  # noqa: B023 (called at once)
      path = getattr(sys.modules[spec], '__file__', None)
      installed = path is None or any(
        os.path.realpath(path).startswith(os.path.realpath(p) + os.sep)
        for p in (sys.prefix, sys.base_prefix)
      )
      imported.append(spec if installed else os.path.abspath(path))
  return tuple(imported)


def _import_file(spec, path):
  """Imports the file `path`: under its dotted name if it is in a package
  (folders with __init__.py), its root then importable; else under a name
  of its own, its folder importable."""
  folder, name = os.path.split(os.path.splitext(path)[0])
  parts = [name]
  while os.path.isfile(os.path.join(folder, '__init__.py')):
    folder, package = os.path.split(folder)
    parts.insert(0, package)
  if folder not in sys.path:
    sys.path.insert(0, folder)
  if len(parts) > 1:
    _exec(spec, lambda: importlib.import_module('.'.join(parts)))
    return
  # A name of its own: a user's `tasks.py` must not shadow our `tasks`.
  module_name = (
    'tff_algos_user_' + hashlib.sha256(path.encode()).hexdigest()[:12]
  )
  if module_name in sys.modules:
    return
  module_spec = importlib.util.spec_from_loader(
    module_name, importlib.machinery.SourceFileLoader(module_name, path)
  )
  module = importlib.util.module_from_spec(module_spec)
  sys.modules[module_name] = module
  _exec(
    spec,
    lambda: module_spec.loader.exec_module(module),
    lambda: sys.modules.pop(module_name, None),
  )


def _exec(spec, load, undo=lambda: None):
  try:
    load()
  except ModuleNotFoundError as e:
    undo()
    raise ImportFailed(f'--import={spec}: no module named {e.name!r}') from None
  except Exception as e:
    undo()
    raise ImportFailed(
      f'--import={spec} failed: {type(e).__name__}: {e}'
    ) from None


def imports_in(args) -> list[str]:
  """The --import values of `args` (flag files expanded)."""
  return [a.split('=', 1)[1] for a in args if a.startswith('--import=')]
