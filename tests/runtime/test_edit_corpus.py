"""A corpus of edits a researcher makes between two runs that share one
computation cache folder: each run after an edit gives a metrics.csv
byte-identical to a run of the edited code with the cache off, and other
than the run before the edit (the edit mattered).

The edits reach the model through everything a cache key made of
fingerprints of our own code could miss: the --import'ed file, modules it
imports one and two levels deep, a config file the model function reads,
an environment variable read at import, Keras's global settings (the
mixed-precision policy, floatx), a kernel (this process) in which a cell
redefines the model function, and a monkeypatched package function. The
command-line cases run the real command in subprocesses; the in-process
ones use the package's run as a notebook does.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import REPO
from conftest import USER_ENV
import helpers
from tff_algos.simulation import experiment
from tff_algos.simulation import run_dir
import warm

NOT_IN_FAST_SET = (
  'each case trains twice, before and after its edit (25 s and more); the '
  'cache it checks is in the fast set through test_computation_cache.py'
)

# The user's code: a task whose MLP's hidden layer comes from a module of
# theirs, whose activation comes from a third; its depth from model.json.
FILES = {
  'my_task.py': """
        import collections
        import json
        import os

        import numpy as np
        import tensorflow as tf
        import tensorflow_federated as tff

        import my_layers
        import tasks

        WIDTH = 8
        EXTRA = int(os.environ.get('MY_TASK_EXTRA_WIDTH', '0'))
        CONFIG = os.path.join(os.path.dirname(__file__), 'model.json')


        def model_fn():
          with open(CONFIG) as f:
            depth = json.load(f)['depth']
          model = tf.keras.Sequential(
              [tf.keras.layers.InputLayer(input_shape=(4,))] +
              [my_layers.hidden(WIDTH + EXTRA) for _ in range(depth)] +
              [tf.keras.layers.Dense(2)])
          return tff.learning.models.from_keras_model(
              model, loss=tf.keras.losses.SparseCategoricalCrossentropy(
                  from_logits=True),
              input_spec=collections.OrderedDict(
                  x=tf.TensorSpec([None, 4], tf.float32),
                  y=tf.TensorSpec([None], tf.int32)),
              metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                  name='accuracy')])


        def load(data_dir, seed):
          del data_dir
          rng = np.random.default_rng(seed)
          def client(n):
            y = rng.integers(0, 2, n).astype(np.int32)
            x = (rng.normal(0, 1, (n, 4)) + y[:, None]).astype(np.float32)
            return collections.OrderedDict(x=x, y=y)
          names = [f'c{k}' for k in range(4)]
          return tasks.from_arrays('edited', {n: client(20) for n in names},
                                   {n: client(5) for n in names}, model_fn)


        tasks.register('edited', load, 'the edit corpus task')
        """,
  'my_layers.py': """
        import tensorflow as tf

        import my_activations


        def hidden(width):
          return tf.keras.layers.Dense(width, activation=my_activations.act)
        """,
  'my_activations.py': """
        import tensorflow as tf

        SLOPE = 0.0


        def act(x):
          return tf.nn.leaky_relu(x, alpha=SLOPE)
        """,
  'model.json': '{"depth": 1}',
}
RUN = (
  '--task=edited',
  '--algo=fedprox',
  '--rounds=2',
  '--clients_per_round=2',
  '--epochs=1',
  '--batch_size=5',
  '--client_lr=0.1',
  '--progress=false',
)


def _replace(name, old, new):
  def edit(folder, env):
    path = folder / name
    text = path.read_text()
    assert old in text, (name, old)
    path.write_text(text.replace(old, new))
    return env

  return edit


def _keras_global(setting):
  """An edit: the user's module sets a Keras global after its imports (in
  place of one an earlier edit set)."""

  def edit(folder, env):
    path = folder / 'my_task.py'
    text = ''.join(
      line
      for line in path.read_text().splitlines(True)
      if not line.startswith('tf.keras.')
    )
    path.write_text(
      text.replace('import tasks\n', f'import tasks\n{setting}\n')
    )
    return env

  return edit


def _environment(name, value):
  def edit(folder, env):
    del folder
    return dict(env, **{name: value})

  return edit


# name → edit(user folder, environment) → environment of the edited run.
# Each also matters on top of those before it (the test applies them in
# turn): the constant two modules down precedes the edit that stops using
# it.
COMMAND_LINE_EDITS = {
  "a constant in the --import'ed file": _replace(
    'my_task.py', 'WIDTH = 8', 'WIDTH = 16'
  ),
  'a constant two modules down': _replace(
    'my_activations.py', 'SLOPE = 0.0', 'SLOPE = 0.3'
  ),
  'a function body one module down (leaky relu to tanh: same shapes)': (
    _replace(
      'my_layers.py', 'activation=my_activations.act', 'activation=tf.nn.tanh'
    )
  ),
  'a config file the model function reads': _replace(
    'model.json', '"depth": 1', '"depth": 2'
  ),
  'an environment variable read at import': _environment(
    'MY_TASK_EXTRA_WIDTH', '4'
  ),
  "Keras's mixed-precision policy, set by the user's module": (
    _keras_global(
      'tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")'
    )
  ),
  "Keras's floatx, set by the user's module": _keras_global(
    'tf.keras.backend.set_floatx("float64")'
  ),
}


def _user_folder(tmp_path):
  folder = tmp_path / 'mine'
  folder.mkdir()
  for name, text in FILES.items():
    (folder / name).write_text(textwrap.dedent(text).lstrip())
  return folder


def _start(folder, out, env, cache_on):
  """The command line as the user runs it, from their folder, started;
  with the folder it writes."""
  env = dict(
    env,
    TFF_ALGOS_COMPUTATION_CACHE='1' if cache_on else '0',
    PYTHONPATH=str(REPO),
  )
  return subprocess.Popen(
    warm.command(
      '-m',
      'tff_algos',
      f'--import={folder / "my_task.py"}',
      *RUN,
      f'--output_dir={out}',
    ),
    cwd=folder,
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
  ), out


def _metrics(*runs):
  """Each run's metrics.csv bytes, once all have ended. The runs go side
  by side; one that fails stops the others."""
  try:
    outputs = []
    for run, out in runs:
      _, stderr = run.communicate(timeout=600)
      assert run.returncode == 0, stderr[-2000:]
      outputs.append((out / 'metrics.csv').read_bytes())
    return outputs
  finally:
    for run, _ in runs:
      if run.poll() is None:
        run.terminate()
        run.wait()


@pytest.mark.slow
def test_each_edit_between_two_cached_runs_is_seen(tmp_path):
  """The edits in turn, each on top of the last, one cache folder: the run
  after each, cache on, is byte for byte the run with it off, and not the
  run before the edit."""
  folder = _user_folder(tmp_path)
  env = dict(USER_ENV, TFF_ALGOS_CACHE=str(tmp_path / 'cache'))
  # The first run warms the cache.
  (before,) = _metrics(_start(folder, tmp_path / 'before', env, cache_on=True))
  for step, (name, edit) in enumerate(COMMAND_LINE_EDITS.items()):
    env = edit(folder, env)
    cached, off = _metrics(
      _start(folder, tmp_path / f'{step}_cached', env, cache_on=True),
      _start(folder, tmp_path / f'{step}_off', env, cache_on=False),
    )
    assert cached == off, name
    assert cached != before, name
    before = cached


def _in_process_run(
  tmp_path, name, model_fn, cache_on, monkeypatch, **settings
):
  monkeypatch.setenv('TFF_ALGOS_COMPUTATION_CACHE', '1' if cache_on else '0')
  task, _ = helpers.task_and_arrays()
  task = dataclasses.replace(task, model_fn=model_fn)
  out = tmp_path / name
  experiment.run(
    helpers.quick_config(rounds=2, **settings),
    task,
    str(out),
    show_progress=False,
  )
  return (out / 'metrics.csv').read_bytes()


def test_a_kernel_that_redefines_the_model_function(tmp_path, monkeypatch):
  """A notebook's cell redefines model_fn (same shapes, another activation)
  and trains again in the same process."""
  import tensorflow as tf

  from tasks import models

  def model_fn():  # The first cell's model: softmax regression.
    return models.multinomial_logistic_regression(60, 10)()

  before = _in_process_run(tmp_path, 'before', model_fn, True, monkeypatch)

  def model_fn():
    model = models.multinomial_logistic_regression(60, 10)()
    model._keras_model.layers[-1].activation = tf.nn.tanh
    return model

  cached = _in_process_run(tmp_path, 'cached', model_fn, True, monkeypatch)
  assert cached == _in_process_run(
    tmp_path, 'off', model_fn, False, monkeypatch
  )
  assert cached != before


def test_a_monkeypatched_package_function(tmp_path, monkeypatch):
  """The per-client path takes each minibatch with `model_ops.take`."""
  from tff_algos.learning import model_ops

  task, _ = helpers.task_and_arrays()
  per_client = dict(client_execution='per_client')
  before = _in_process_run(
    tmp_path, 'before', task.model_fn, True, monkeypatch, **per_client
  )
  take = model_ops.take

  def half(data, indices):  # A patched minibatch: its first half only.
    import tensorflow as tf

    return take(data, indices[: tf.shape(indices)[0] // 2 + 1])

  monkeypatch.setattr(model_ops, 'take', half)
  cached = _in_process_run(
    tmp_path, 'cached', task.model_fn, True, monkeypatch, **per_client
  )
  assert cached == _in_process_run(
    tmp_path, 'off', task.model_fn, False, monkeypatch, **per_client
  )
  assert cached != before


def test_a_monkeypatched_function_of_compiled_clients(tmp_path, monkeypatch):
  """Compiled clients compute each example's loss with
  `KerasModelFn.example_losses`: its patch changes the run, and a resumed
  run of the patched code is told apart (the compiled work's
  fingerprint)."""
  from tff_algos.learning import model_ops

  task, _ = helpers.task_and_arrays()
  before = _in_process_run(tmp_path, 'before', task.model_fn, True, monkeypatch)
  losses = model_ops.KerasModelFn.example_losses
  monkeypatch.setattr(
    model_ops.KerasModelFn,
    'example_losses',
    lambda self, y, p: 2.0 * losses(self, y, p),
  )
  patched = _in_process_run(
    tmp_path, 'patched', task.model_fn, True, monkeypatch
  )
  assert patched != before
  with pytest.raises(run_dir.OutputDirError, match='computation'):
    _in_process_run(tmp_path, 'before', task.model_fn, True, monkeypatch)


def test_a_siblings_import_works_from_any_folder(tmp_path):
  """--import=../mine/my_task.py imports its sibling my_layers, as Python
  does for a script; config.json records it so that the plot finds it from
  another folder."""
  folder = _user_folder(tmp_path)
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()
  env = dict(USER_ENV, PYTHONPATH=str(REPO))
  out = elsewhere / 'run'
  result = subprocess.run(
    warm.command(
      '-m',
      'tff_algos',
      '--import=../mine/my_task.py',
      *RUN,
      f'--output_dir={out}',
    ),
    cwd=elsewhere,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  config = json.loads((out / 'config.json').read_text())
  assert config['imports'] == [str(folder / 'my_task.py')]
  modules = config['provenance'][0]['modules']
  assert {os.path.basename(p) for p in modules} >= {
    'my_task.py',
    'my_layers.py',
    'my_activations.py',
  }
  third = tmp_path / 'third'
  third.mkdir()
  shutil.copytree(out, third / 'run')
  plotted = subprocess.run(
    warm.command('-m', 'tff_algos.plot', 'run', '--out=f.png'),
    cwd=third,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert plotted.returncode == 0 and 'note' not in plotted.stderr, (
    plotted.stderr
  )
