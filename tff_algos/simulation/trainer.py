"""Training any learning process on a task with the package's sampling,
evaluation and round callbacks: the public trainer, and the pieces the
command line's runs (`experiment`) are wired from.

    import tasks
    from tff_algos.simulation import trainer

    task = tasks.load_task('synthetic_1_1')
    result = trainer.train(my_algorithm, task, rounds=15, epochs=20)
    result.rows[-1]['train_loss']

`my_algorithm` is a function of a `model_fn` returning a
`tff.learning.templates.LearningProcess` (or None: the registered algorithm
`algo`). `train` builds the process, its evaluation and its initial model
from the same `model_fn` in one call, so a notebook that redefines its
model and trains again can never measure one model with another's
evaluator. Settings are a `config.Config`'s fields (the command line's
flags), resolved once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

import tasks as tasks_lib
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import optimizers
from tff_algos.algorithms.callbacks import RoundCallback
from tff_algos.privacy import accounting
from tff_algos.privacy import mechanisms
from tff_algos.runtime import tracing
from tff_algos.simulation import callbacks as callbacks_lib
from tff_algos.simulation import columns as columns_lib
from tff_algos.simulation import compiled
from tff_algos.simulation import config as config_lib
from tff_algos.simulation import evaluation
from tff_algos.simulation import loop as loop_lib
from tff_algos.simulation import outputs
from tff_algos.simulation.client_store import ClientStore
from tff_algos.simulation.client_tensors import ClientTensors
from tff_algos.simulation.sampling import ClientSampler

ProcessFn = Callable[[Any], Any]  # model_fn → LearningProcess


def build_process(
  settings: config_lib.Settings,
  model_fn,
  client_input=None,
  process_fn: ProcessFn | None = None,
):
  """The run's learning process: `process_fn(model_fn)`, or the registered
  algorithm of `settings` (the simulation build unless `client_input`
  says otherwise), traced deterministically (`tracing.deterministic`)."""
  tracing.install()
  with tracing.deterministic():
    if process_fn is not None:
      return process_fn(model_fn)
    return settings.entry.build(
      model_fn, settings.algorithm, client_input or learning.ScheduledInput()
    )


def build_for_run(
  settings: config_lib.Settings,
  model_fn,
  process_fn: ProcessFn | None = None,
  workers: str = '',
) -> tuple[Any, str]:
  """(the run's process, how its clients train): with
  --client_execution=compiled, or auto, where the run allows it and
  (auto) it pays (`compiled.refusal`, `compiled.work_refusal`), the
  algorithm built with `learning.ComputedInput` ('compiled by XLA', its
  engine `compiled_engine`); else the per-client process ('per client',
  and why), whose clients read their data where they train
  (`learning.StoredInput`) unless --client_execution=per_client (the
  reference: their data are sent).
  Installs our local runtime (`runtime.install`) as TFF's default context,
  so that a caller that never called `runtime.start()` (a notebook) runs
  the process on it: TFF's own default context starts a worker that
  listens on every interface and may outlive the process."""
  runtime.install()
  execution = settings.run.client_execution
  if execution == 'per_client':
    return build_process(settings, model_fn, process_fn=process_fn), (
      'per client (--client_execution=per_client)'
    )
  if process_fn is not None:
    return build_process(settings, model_fn, process_fn=process_fn), (
      'per client (a process_fn of its own takes the per-client input)'
    )
  why = compiled.refusal(
    model_fn, execution, workers or runtime.remote_workers()
  )
  if why is None:
    process, why = _built_with(
      settings,
      model_fn,
      learning.ComputedInput(),
      lambda p: isinstance(p, learning.ComputedProcess),
    )
    why = why or compiled.work_refusal(
      process.model_fn,
      process.local_training,
      settings.algorithm.batch_size,
    )
    if why is None:
      return process, compiled.EXECUTION
  process, refused = _built_with(
    settings, model_fn, learning.StoredInput(), learning.takes_stored_input
  )
  if refused is None:
    return process, f'per client ({why}; each reads its data where it trains)'
  # A builder that ignores the input built the process it builds for any.
  process = process or build_process(settings, model_fn)
  return process, f'per client ({why}; {refused})'


def _built_with(settings, model_fn, client_input, takes_it):
  """(the registered algorithm built with `client_input`, None), or
  (None, why not) where its builder refused it, or (the process, why not)
  where the process it built does not take it (`takes_it(process)`
  false)."""
  name = type(client_input).__name__
  try:
    process = build_process(settings, model_fn, client_input)
  except learning.ComputedUnavailable as e:
    return None, str(e)
  except Exception as e:
    return None, (
      f"the algorithm's builder refused learning.{name} "
      f'({type(e).__name__}: {e})'
    )
  if not takes_it(process):
    return process, f"the algorithm's builder does not take learning.{name}"
  return process, None


@dataclasses.dataclass(frozen=True)
class ClientData:
  """A task's clients as a run uses them: ids and arrays by client index
  (training; test, whose clients may be others), the clients whose
  training data the evaluation reads, and the run's tensors of them
  (`client_tensors.ClientTensors`), shared by its evaluation, dissimilarity
  and compiled clients."""

  client_ids: Sequence[str]
  train: Sequence[Any]
  test: Sequence[Any] | None
  evaluated: Sequence[Any]
  test_ids: Sequence[str] = ()
  tensors: ClientTensors = dataclasses.field(
    default_factory=ClientTensors, compare=False, repr=False
  )

  @classmethod
  def of(cls, task, settings: config_lib.Settings) -> ClientData:
    return cls.from_arrays(
      settings,
      tasks_lib.client_arrays(task.train),
      tasks_lib.client_arrays(task.test),
      list(task.client_ids),
      list(task.test.client_ids),
    )

  @classmethod
  def from_arrays(
    cls, settings, train, test=None, client_ids=None, test_ids=None
  ):
    """Arrays by client index (ids: their indices unless given); the
    evaluated clients those of --eval_clients, else all."""
    evaluated = train
    if settings.measurement.eval_clients is not None:
      evaluated = [
        train[k]
        for k in ClientSampler(
          len(train), 1, 1, settings.run.seed
        ).evaluation_clients(settings.measurement.eval_clients)
      ]
    ids, trained = settings.entry.clients.training(
      client_ids or [str(k) for k in range(len(train))], train
    )
    test_ids = test_ids or [str(k) for k in range(len(test or ()))]
    return cls(ids, trained, test, evaluated, test_ids)


def sampler(settings: config_lib.Settings, train) -> ClientSampler:
  """The run's sampler over the clients of `train` (their arrays: n_k for
  proportional sampling)."""
  return ClientSampler(
    len(train),
    settings.sampling.clients_per_round,
    settings.algorithm.epochs,
    settings.run.seed,
    settings.sampling.straggler_fraction,
    scheme=settings.sampling.scheme,
    client_sizes=[len(next(iter(a.values()))) for a in train],
    steps_per_round=settings.entry.clients.steps_per_round(
      settings.algorithm.hparams
    ),
  )


def accounted_mechanism(
  settings: config_lib.Settings, process
) -> accounting.Mechanism | None:
  """The DP mechanism a run's ε is computed from: the one its process was
  built with, as the model aggregator's own DP event in the process state
  says (`privacy.mechanisms.dp_events`); None for a run without
  --aggregator=dp. Where that is the flags' mechanism to float32
  precision, the flags' exact values (`accounting` says why); else the
  process's (an algorithm that builds its own DP aggregator).

  Raises:
    ConfigError: the flags ask for DP and the process carries no DP
      aggregator (e.g. an algorithm whose builder makes its own mean: no
      noise would be added, so no ε can be claimed), more than one, or one
      whose event the accountant cannot compose.
  """
  dp = settings.privacy
  if dp is None:
    return None
  events = mechanisms.dp_events(process.initialize())
  if len(events) != 1:
    raise config_lib.ConfigError(
      f'--aggregator=dp: the process of --algo={settings.algo} carries '
      'no DP aggregator, '
      "so no ε can be claimed for it: its builder must pass the run's "
      'aggregator on, model_aggregator=core.model_aggregator(settings, '
      'client_input) (docs/guide/your-own.md)'
      if not events
      else f'--aggregator=dp: the process of --algo={settings.algo} carries '
      f'{len(events)} DP aggregators; the accountant accounts for one'
    )
  try:
    built = accounting.Mechanism.of_event(events[0])
  except accounting.UncertifiedMechanismError as e:
    raise config_lib.ConfigError(f'--aggregator=dp: {e}') from None
  declared = accounting.mechanism(
    dp.noise_multiplier,
    clients_per_round=settings.sampling.clients_per_round,
    adaptive_clipping=dp.adaptive_clipping,
    noise_cohort_size=dp.noise_cohort,
  )
  return declared if built.matches(declared) else built


def privacy_spent(
  settings: config_lib.Settings,
  mechanism: accounting.Mechanism | None,
  num_clients: int,
) -> list[RoundCallback]:
  """A DP run's ε column (`callbacks.PrivacySpent`: the ε of `mechanism`,
  the trained model's, and with a noise cohort the deployment's) and
  adaptive clipping's clip norm (`callbacks.AdaptiveClip`), or [] for a
  run without DP (`mechanism` None)."""
  if mechanism is None:
    return []
  dp = settings.privacy
  sampling = dict(
    num_clients=num_clients,
    clients_per_round=settings.sampling.clients_per_round,
    sampling=settings.sampling.scheme,
    accountant=dp.accountant,
  )
  deployment = None
  if dp.noise_cohort is not None:
    deployment = accounting.epsilons(
      dp.noise_multiplier,
      settings.run.rounds,
      dp.delta,
      adaptive_clipping=dp.adaptive_clipping,
      noise_cohort_size=dp.noise_cohort,
      **sampling,
    )
  adaptive = (
    [
      callbacks_lib.AdaptiveClip(
        dp.initial_clip or mechanisms.INITIAL_L2_NORM_CLIP
      )
    ]
    if dp.adaptive_clipping
    else []
  )
  return adaptive + [
    callbacks_lib.PrivacySpent(
      mechanism,
      accounting.epsilons_of(
        mechanism, settings.run.rounds, dp.delta, **sampling
      ),
      deployment,
    )
  ]


def measurements(
  settings: config_lib.Settings,
  model_fn,
  data: ClientData,
  every_round: bool = False,
  compiled: bool = False,
) -> list[RoundCallback]:
  """What is measured of the global model: f(w) and accuracy every
  --eval_every rounds, round 0 and the last (every round with
  `every_round`), and the dissimilarity every --dissimilarity_every.
  A model evaluated client by client has its predictions made across
  clients but with --client_execution=per_client (the reference path);
  with `compiled` (the clients train compiled), a dense model's
  evaluation is compiled too (`evaluation.build_evaluation`): a run whose
  clients train per client evaluates as the reference does, to the bit."""
  last = settings.run.rounds
  across_clients = settings.run.client_execution != 'per_client'
  measured = [
    callbacks_lib.Evaluation(
      evaluation.build_evaluation(
        model_fn,
        across_clients=across_clients,
        client_tensors=data.tensors,
        compiled=compiled,
      ),
      data.evaluated,
      data.test,
      lambda r: (
        every_round or r % settings.measurement.eval_every == 0 or r == last
      ),
      sampled=settings.measurement.eval_clients is not None,
    )
  ]
  if settings.measurement.dissimilarity_every:
    measured.append(
      callbacks_lib.Dissimilarity(
        evaluation.build_dissimilarity(model_fn, data.tensors),
        data.train,
        settings.measurement.dissimilarity_every,
      )
    )
  return measured


def round_callbacks(
  settings: config_lib.Settings,
  model_fn,
  data: ClientData,
  process,
  evaluate: bool = True,
  more: Sequence[RoundCallback] = (),
) -> list[RoundCallback]:
  """A run's callbacks before its outputs, in order: its constant columns,
  the measurements (`evaluate`), the ε of the DP mechanism `process` was
  built with (`accounted_mechanism`), the algorithm's own callbacks and
  process metrics, `more` (a caller's), the client learning-rate schedule
  and --stop_at_target. (The divergence check comes after the outputs
  that keep the diverged round's row.)"""
  algorithm = settings.entry.round_callbacks(settings.algorithm)
  chosen = [*algorithm, *more]
  measured = (
    measurements(
      settings,
      model_fn,
      data,
      every_round=any(c.needs_evaluation for c in chosen),
      compiled=isinstance(process, learning.ComputedProcess),
    )
    if evaluate
    else []
  )
  client = settings.algorithm.client_optimizer
  return [
    callbacks_lib.Columns(settings.hparam_columns),
    *measured,
    *privacy_spent(
      settings, accounted_mechanism(settings, process), len(data.train)
    ),
    *algorithm,
    callbacks_lib.ReportedMetrics(settings.entry.metrics),
    *more,
    *(
      [optimizers.ClientLearningRateSchedule(client)]
      if client is not None and client.schedule.kind != 'constant'
      else []
    ),
    *(
      [callbacks_lib.StopAtAccuracy(settings.measurement.stop_at_accuracy)]
      if settings.measurement.stop_at_accuracy is not None
      else []
    ),
  ]


def run_outputs(
  settings: config_lib.Settings,
  records: Sequence[RoundCallback] = (),
  after: Sequence[RoundCallback] = (),
  show_progress: bool | None = None,
) -> list[RoundCallback]:
  """What follows a run's `round_callbacks`: `records` (what keeps each
  round's row: metrics.csv, or rows in memory), the divergence check
  (after them, so that a diverged round's row is kept), `after` (e.g. the
  checkpoints, which a diverged round does not reach) and the progress bar
  (None: none)."""
  varying = [  # One the algorithm fixes (FedAvg's μ = 0) tells nothing.
    name
    for name in settings.hparam_columns
    if not settings.entry.hyperparameter(name).fixed
  ]
  bar = (
    [] if show_progress is None else [outputs.Progress(varying, show_progress)]
  )
  return [*records, callbacks_lib.DivergenceCheck(), *after, *bar]


def _own_callbacks(settings, callbacks):
  """Those of `callbacks` that the run's algorithm added."""
  own = {type(c) for c in settings.entry.round_callbacks(settings.algorithm)}
  return [c for c in callbacks if type(c) in own]


def metrics_columns(settings, callbacks) -> tuple[str, ...]:
  """metrics.csv's columns for a run of `settings` with `callbacks`: the
  built-in ones with the algorithm's hyper-parameters, then its callbacks'
  (derived from the built-in measurements, e.g. from the update spread),
  then the other callbacks'."""
  own = _own_callbacks(settings, callbacks)
  return columns_lib.names(
    settings.hparam_columns,
    [c for cb in [*own, *callbacks] for c in cb.columns],
    sampled_training=settings.measurement.eval_clients is not None,
  )


def algorithm_columns(settings) -> dict[str, str]:
  """The columns the run's algorithm adds (its hyper-parameters', its
  callbacks' and its process metrics'), name → what each holds."""
  columns = dict(settings.entry.columns)
  for callback in settings.entry.round_callbacks(settings.algorithm):
    columns.update(callback.columns)
  columns.update(settings.entry.metrics)
  return columns


def compiled_engine(
  settings: config_lib.Settings, process, data: ClientData
) -> compiled.Engine | None:
  """The engine of a `learning.ComputedProcess` (`build_for_run` chose
  compiled clients) on `data`; None for another process."""
  if not isinstance(process, learning.ComputedProcess):
    return None
  return compiled.Engine(
    process, data.train, settings.algorithm.batch_size, data.tensors
  )


def make_loop(
  settings: config_lib.Settings,
  process,
  data: ClientData,
  callbacks: Sequence[RoundCallback],
  engine: compiled.Engine | None = None,
  stop_requests: loop_lib.StopRequests | None = None,
) -> loop_lib.Loop:
  """The loop of `process` on `data` (its stop requests recorded in
  `stop_requests`, else its own). A process with a DP aggregator runs
  every round, one without participants too: the server releases the
  noise of a zero sum, as a deployment's would, and the accountant counts
  every round."""
  engine = engine or compiled_engine(settings, process, data)
  return loop_lib.Loop(
    process,
    sampler(settings, data.train),
    settings.policy,
    settings.algorithm.batch_size,
    data.train,
    list(callbacks),
    release_empty_rounds=bool(mechanisms.dp_events(process.initialize())),
    computed=engine.inputs if engine else None,
    client_store=(
      _checked_store(data.train)
      if learning.takes_stored_input(process)
      else None
    ),
    stop_requests=stop_requests or loop_lib.StopRequests(),
  )


def _checked_store(train) -> ClientStore:
  """The store of the clients' arrays `train`, which every remote worker
  can read."""
  store = ClientStore.of(train)
  store.check_remote_workers(train)
  return store


def loop_for(
  settings: config_lib.Settings,
  model_fn,
  train,
  test=None,
  *,
  process=None,
  evaluate: bool = True,
) -> loop_lib.Loop:
  """The run's loop over the client arrays `train` (and `test`), with its
  round callbacks but no outputs (`process`: built if not given; without
  `evaluate`, no measurement of the global model): for tests, benchmarks
  and scripts that step rounds themselves."""
  data = ClientData.from_arrays(settings, train, test)
  process = process or build_for_run(settings, model_fn)[0]
  return make_loop(
    settings,
    process,
    data,
    [
      *round_callbacks(settings, model_fn, data, process, evaluate=evaluate),
      *run_outputs(settings),
    ],
  )


class Rows(RoundCallback):
  """Keeps every round's row (a copy) in memory."""

  def __init__(self):
    self.rows = []

  def after_round(self, end):
    self.rows.append(dict(round=end.round_num, **end.row))


@dataclasses.dataclass(frozen=True)
class Training:
  """What `train` returns: every round's row (round 0: the initial model),
  the final process state, its model weights, the process and the
  resolved settings."""

  rows: list[dict]
  state: Any
  weights: Any
  process: Any
  settings: config_lib.Settings


def train(
  process_fn: ProcessFn | None,
  task,
  *,
  model_fn=None,
  callbacks: Sequence[RoundCallback] = (),
  show_progress: bool = False,
  **settings,
) -> Training:
  """Trains `process_fn(model_fn)` (None: the registered algorithm of
  `algo`) on `task`'s clients from the seeded initial model, with the
  package's client sampling, stragglers, evaluation and callbacks.

  Args:
    process_fn: model_fn → `tff.learning.templates.LearningProcess`, whose
      `next` takes the simulation's client input (`learning.ScheduledInput`;
      the package's builders and `learning.build_process` take it by
      default); or None.
    task: a `tasks.base.FederatedTask` (e.g. `tasks.load_task(name)`).
    model_fn: the model (default: the task's). The process, the evaluation
      and the initial weights are all built from it here.
    callbacks: round callbacks of your own, run after the measurements and
      the algorithm's (`algorithms.callbacks.RoundCallback`).
    show_progress: a progress bar on stderr.
    **settings: `config.Config` fields: rounds, clients_per_round, epochs,
      batch_size, client_lr, mu, straggler_fraction, seed, eval_every, ...
      (the algorithm's defaults for the rest; `algo` names whose, for
      `process_fn` too: epochs, B and the straggler policy).

  Returns:
    A `Training`. ConfigError for bad settings, TypeError for a process
    whose model weights are not those of `model_fn`.
  """
  model_fn = model_fn or task.model_fn
  settings = config_lib.resolve(
    config_lib.Config.create(task=task.name, **settings),
    num_clients=len(task.client_ids),
  )
  data = ClientData.of(task, settings)
  process, _ = build_for_run(settings, model_fn, process_fn=process_fn)
  initial = learning.initial_model_weights(model_fn, settings.run.seed)
  _check_model(process, initial)
  rows = Rows()
  loop = make_loop(
    settings,
    process,
    data,
    [
      *round_callbacks(settings, model_fn, data, process, more=callbacks),
      *run_outputs(settings, records=[rows], show_progress=show_progress),
    ],
  )
  state = loop.run(loop.initial_state(initial), range(settings.run.rounds + 1))
  return Training(
    rows.rows, state, process.get_model_weights(state), process, settings
  )


def _check_model(process, weights):
  """TypeError unless `process` trains a model with `weights`' structure
  (a process built from another model_fn than the evaluation's)."""
  import tensorflow as tf

  expected = process.get_model_weights.type_signature.result
  try:
    tf.nest.assert_same_structure(
      list(weights.trainable), list(expected.trainable), check_types=False
    )
    shapes = [tuple(w.shape) for w in weights.trainable]
    wanted = [tuple(t.shape) for t in expected.trainable]
  except (ValueError, TypeError, AttributeError):
    shapes, wanted = None, 'another structure'
  if shapes != wanted:
    raise TypeError(
      f'the process trains a model whose weights are '
      f'{wanted}, but model_fn builds {shapes}: build the '
      'process from the same model_fn'
    )
