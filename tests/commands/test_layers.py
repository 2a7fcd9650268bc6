"""The package's layers: who may import what.

Every Python module of the project belongs to a layer (`LAYERS`, bottom
first) and may import only modules of its own layer or of layers below it;
no two modules may import each other, directly or through others (a
submodule's import of its own package's __init__, whose names it shares, is
not counted). Imports inside functions count too.
"""

import ast
import re
import subprocess
import sys

import pytest

from conftest import REPO
import warm

RUNTIME = REPO / 'tff_algos' / 'runtime'
# Every Python file of the project: the package, tasks, the command line,
# the benchmarks and the tests (not hidden folders such as the virtual
# environments .venv/ and `make notebook`'s .venv-jupyter/, nor build/).
SOURCES = sorted(
  p
  for p in REPO.rglob('*.py')
  if not any(
    part.startswith('.') or part == 'build'
    for part in p.relative_to(REPO).parts[:-1]
  )
)
# Bottom to top: a module may import its own layer and those below.
LAYERS = (
  ('utilities', ('tff_algos.logs',)),
  ('privacy', ('tff_algos.privacy',)),
  ('runtime', ('tff_algos.runtime',)),
  ('learning', ('tff_algos.learning',)),
  ('tasks', ('tasks',)),
  ('algorithms', ('tff_algos.algorithms',)),
  ('simulation', ('tff_algos.simulation',)),
  ('program', ('tff_algos.program',)),
  ('analysis', ('tff_algos.analysis',)),
  (
    'commands',
    (
      'tff_algos.cli',
      'tff_algos.run',
      'tff_algos.export',
      'tff_algos.plot',
      'tff_algos.worker',
      'tff_algos.__main__',
      'tff_algos.interpolate',
      'tff_algos.user_modules',
      'tff_algos',
      'run_experiment',
    ),
  ),
)


def _module_name(path):
  parts = list(path.relative_to(REPO).with_suffix('').parts)
  if parts[-1] == '__init__':
    parts = parts[:-1]
  return '.'.join(parts)


def _imported_modules(path):
  tree = ast.parse(path.read_text(), str(path))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module
      # `from package import module` imports the module.
      yield from (f'{node.module}.{alias.name}' for alias in node.names)


_EXACT = {'tff_algos', 'run_experiment'}  # Not their submodules.


def _layer(module):
  """The index in LAYERS of the module `module`, or None (not listed)."""
  best = None
  for index, (_, prefixes) in enumerate(LAYERS):
    for prefix in prefixes:
      if module == prefix or (
        prefix not in _EXACT and module.startswith(prefix + '.')
      ):
        if best is None or len(prefix) > len(best[1]):
          best = (index, prefix)
  return None if best is None else best[0]


def _graph(paths):
  """{module: {our modules it imports}} of the package, tasks and the
  command line (the tests, docs and benchmarks sit above them all)."""
  ours = {_module_name(p): p for p in paths}
  graph = {}
  for name, path in ours.items():
    edges = set()
    for imported in _imported_modules(path):
      if (
        imported in ours
        and imported != name
        and not (name.startswith(imported + '.'))
      ):  # Its own package's __init__.
        edges.add(imported)
    graph[name] = edges
  return graph


def _package_sources():
  return [
    p
    for p in SOURCES
    if p.relative_to(REPO).parts[0]
    in ('tff_algos', 'tasks', 'run_experiment.py')
  ]


def _upward(graph):
  return sorted(
    f'{a} ({LAYERS[_layer(a)][0]}) imports {b} ({LAYERS[_layer(b)][0]})'
    for a, edges in graph.items()
    for b in edges
    if _layer(b) > _layer(a)
  )


def _cycles(graph):
  """The module cycles of `graph` (Tarjan's strongly connected components
  of more than one module)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in graph.get(node, ()):
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = []
      while True:
        other = stack.pop()
        on_stack.discard(other)
        component.append(other)
        if other == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in graph:
    if node not in index:
      visit(node)
  return found


@pytest.mark.fast
def test_imports_point_down_the_layers_and_form_no_cycle():
  graph = _graph(_package_sources())
  assert len(graph) > 40
  assert not [m for m in graph if _layer(m) is None]
  assert not _upward(graph), _upward(graph)
  assert not _cycles(graph), _cycles(graph)


@pytest.mark.fast
def test_the_checks_see_an_upward_import_and_a_cycle():
  graph = {
    'tff_algos.runtime.local': {'tff_algos.simulation.loop'},
    'tff_algos.simulation.loop': {'tff_algos.runtime.local'},
    'tff_algos.cli': {'tff_algos.simulation.loop'},
  }
  assert _upward(graph) == [
    'tff_algos.runtime.local (runtime) imports tff_algos.simulation.loop '
    '(simulation)'
  ]
  assert _cycles(graph) == [
    ['tff_algos.runtime.local', 'tff_algos.simulation.loop']
  ]


def test_only_the_runtime_layer_imports_tff_internals():
  assert len(SOURCES) > 40
  offenders = [
    f'{path.relative_to(REPO)}: {module}'
    for path in SOURCES
    if RUNTIME not in path.parents
    for module in _imported_modules(path)
    if module.startswith('tensorflow_federated.python')
  ]
  assert not offenders, offenders


def test_the_check_above_sees_an_internal_import(tmp_path):
  bad = tmp_path / 'bad.py'
  bad.write_text(
    'if True:\n  from tensorflow_federated.python.core import framework\n'
  )
  assert 'tensorflow_federated.python.core' in list(_imported_modules(bad))


# A module of ours imports another by an import statement, at module level
# or, to defer it (TensorFlow above all), inside the function that needs it:
# the one way that ruff, type checkers and the checks above all see. Only
# these files import modules whose names they compute:
IMPORTS_BY_NAME = {
  # Users' modules and files, named by --import.
  'tff_algos/user_modules.py',
  # Rebuilds a cached computation's Python containers from the module and
  # class names stored with it.
  'tff_algos/runtime/computation_cache.py',
  # A dataset task's module, named by its CATALOG entry.
  'tasks/__init__.py',
}
# And only this one makes stand-in modules (types.ModuleType subclasses):
# it defers modules of TFF's dependencies that a run never uses, which an
# import statement of ours cannot do.
STAND_INS = {'tff_algos/runtime/imports.py'}


def _deferred_imports(path, root=REPO):
  """(line, what) of each import by name (`importlib.import_module`,
  `__import__`) in `path` and each stand-in module class; one by a constant
  name is an import statement written another way, and so always counted."""
  relative = path.relative_to(root).as_posix()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Call):
      function = node.func
      name = getattr(function, 'attr', None) or getattr(function, 'id', None)
      if name in ('import_module', '__import__'):
        constant = node.args and isinstance(node.args[0], ast.Constant)
        if constant or relative not in IMPORTS_BY_NAME:
          yield node.lineno, ast.unparse(node)
    elif isinstance(node, ast.ClassDef) and relative not in STAND_INS:
      if any(ast.unparse(b).endswith('ModuleType') for b in node.bases):
        yield node.lineno, f'class {node.name}'


def test_modules_defer_imports_only_by_import_statements():
  found = [
    f'{path.relative_to(REPO)}:{line}: {what}'
    for path in _package_sources()
    for line, what in _deferred_imports(path)
  ]
  assert not found, found
  exceptions = {REPO / name for name in IMPORTS_BY_NAME | STAND_INS}
  assert exceptions <= set(_package_sources())  # None of them stale.


def test_the_check_above_sees_an_import_by_name_and_a_stand_in(tmp_path):
  (tmp_path / 'tff_algos').mkdir()
  bad = tmp_path / 'tff_algos' / 'user_modules.py'  # May import by name...
  bad.write_text(
    'import importlib\n'
    'import types\n'
    'def f(name):\n'
    '  importlib.import_module(name)\n'
    "  return importlib.import_module('tensorflow')\n"  # ...but not this.
    'class Stand(types.ModuleType):\n'
    '  pass\n'
  )
  assert sorted(line for line, _ in _deferred_imports(bad, tmp_path)) == [5, 6]
  other = bad.rename(tmp_path / 'tff_algos' / 'other.py')
  found = sorted(line for line, _ in _deferred_imports(other, tmp_path))
  assert found == [4, 5, 6]


@pytest.mark.parametrize(
  'modules',
  [
    # The registry, settings, command-line flags and everything the help
    # and validation of the experiment command need.
    'tff_algos, tff_algos.algorithms, tff_algos.cli, tff_algos.run, '
    'tff_algos.simulation.config, tff_algos.runtime, run_experiment',
    # Analysis: results, sweeps, plots.
    'tff_algos.simulation.results, tff_algos.analysis.sweep, '
    'tff_algos.analysis.plot, tff_algos.plot',
    # Privacy: all but the mechanisms (the DP aggregators).
    'tff_algos.privacy, tff_algos.privacy.budget, tff_algos.privacy.accounting',
    # Packages that hold a module of TensorFlow (analysis.interpolation,
    # program.data_source) but import none of their modules.
    'tff_algos.analysis, tff_algos.program',
  ],
)
def test_modules_that_promise_no_tensorflow_import_none(modules):
  _python(
    f'import sys; import {modules}; '
    'loaded = [m for m in sys.modules if m.split(".")[0] in '
    '("tensorflow", "tensorflow_federated", "keras")]; '
    'assert not loaded, loaded'
  )


def test_remote_workers_code_loads_only_when_workers_are_used():
  # Through the warm interpreter: it holds TensorFlow, none of our modules.
  _python(
    'import sys; from tff_algos import runtime; runtime.start(); '
    'assert "tff_algos.runtime.remote" not in sys.modules; '
    'runtime.stop()',
    python=warm.command(),
  )


def _python(code, python=(sys.executable,)):
  """Runs `code` at the repository's root in `python`, by default a fresh
  interpreter."""
  result = subprocess.run(
    [*python, '-c', code],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr[-2000:]


# The layers that run any algorithm: what they know of one comes from its
# registry entry, so that a user's algorithm is treated as the package's.
GENERIC = (
  'tff_algos/simulation',
  'tff_algos/program',
  'tff_algos/analysis',
  'tff_algos/cli.py',
  'tff_algos/run.py',
)


def _words(tree):
  """(line, word) of every identifier and every word of every string in
  `tree` but its docstrings (which may show a command line)."""
  docs = {
    id(node.body[0].value)
    for node in ast.walk(tree)
    if isinstance(
      node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    )
    and node.body
    and isinstance(node.body[0], ast.Expr)
    and isinstance(node.body[0].value, ast.Constant)
  }
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      if id(node) not in docs:
        yield from ((node.lineno, w) for w in re.findall(r'\w+', node.value))
    elif isinstance(node, (ast.Name, ast.Attribute, ast.arg, ast.keyword)):
      name = getattr(node, 'id', None) or getattr(node, 'attr', None)
      name = name or getattr(node, 'arg', None)
      if name:
        yield getattr(node, 'lineno', 0), name
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      yield node.lineno, node.name


def test_generic_layers_name_no_algorithm_or_its_hyperparameters():
  from tff_algos import algorithms  # noqa: F401  (registers them)
  from tff_algos.algorithms import registry

  entries = [  # The package's own: tests may have registered others.
    registry.get(name)
    for name in registry.names()
    if registry.get(name).build.__module__.startswith('tff_algos.')
  ]
  known = {e.name for e in entries} | {
    h.name for e in entries for h in e.hparams
  }
  # The centralized baseline's block of steps shares its name with FedAvg's
  # u (§3), a column of every run's summary.
  known -= {'updates_per_round'}
  assert {'fedprox', 'fedisgd', 'mu', 'lam', 'adaptive_mu'} <= known
  found = [
    f'{path.relative_to(REPO)}:{line}: {word}'
    for path in SOURCES
    if str(path.relative_to(REPO)).startswith(GENERIC)
    for line, word in _words(ast.parse(path.read_text()))
    if word in known
  ]
  assert not found, found


def test_only_config_json_reads_the_flat_record_of_the_settings():
  """Every layer takes the typed groups of `Settings`; its flat `record`
  (config.json's form) is read by `Settings.to_json` alone."""
  readers = [
    f'{path.relative_to(REPO)}:{node.lineno}'
    for path in SOURCES
    if str(path.relative_to(REPO)).startswith('tff_algos/')
    and path.name != 'config.py'
    for node in ast.walk(ast.parse(path.read_text()))
    if isinstance(node, ast.Attribute)
    and node.attr in ('record', 'config')
    and isinstance(node.value, (ast.Name, ast.Attribute))
    and (getattr(node.value, 'id', None) or node.value.attr).endswith(
      'settings'
    )
  ]
  assert not readers, readers
