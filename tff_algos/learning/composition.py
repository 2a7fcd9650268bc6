"""The builder core: a client work and a server optimizer wired into a TFF
learning process, with TFF's production arguments.

Every algorithm here is `tff.learning.templates.compose_learning_process`
of a distributor (TFF's broadcast by default), a client work, a model
aggregator (TFF's weighted mean by default) and an apply-optimizer
finalizer; the algorithms differ only in the client work and the server
optimizer they pass to `build_process` (and the weighting their paper
says). `build_process` takes what TFF's own builders take
(`tff.learning.algorithms.build_weighted_fed_prox`): `model_distributor`,
`model_aggregator` (weighted or unweighted, as TFF's builders take them)
and `metrics_aggregator`, and checks them.
"""

import collections
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_algos.learning import measurements
from tff_algos.learning import model_ops
from tff_algos.learning.client_definition import UPDATE_SCALE
from tff_algos.learning.client_work import client_weighting as as_weighting
from tff_algos.learning.client_work import ClientInput
from tff_algos.learning.client_work import ComputedInput
from tff_algos.learning.client_work import MetricsAggregator
from tff_algos.learning.client_work import ModelFn
from tff_algos.learning.client_work import ScheduledInput
from tff_algos.learning.client_work import StructClientWork

ModelAggregator = (
  tff.aggregators.WeightedAggregationFactory
  | tff.aggregators.UnweightedAggregationFactory
)
UNIFORM = tff.learning.ClientWeighting.UNIFORM


def _initial_model_weights_fn(model_fn):
  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return initial_model_weights_fn


def compose(
  model_fn: ModelFn,
  client_work: tff.learning.templates.ClientWorkProcess,
  server_optimizer: tff.learning.optimizers.Optimizer,
  aggregator: tff.aggregators.WeightedAggregationFactory | None = None,
  model_distributor: tff.learning.templates.DistributionProcess | None = None,
) -> tff.learning.templates.LearningProcess:
  """Distributor → client work → weighted aggregation → server optimizer
  step (`tff.learning.templates.compose_learning_process`)."""
  initial_model_weights_fn = _initial_model_weights_fn(
    model_ops.variable_model_fn(model_fn)
  )
  weights_type = initial_model_weights_fn.type_signature.result
  aggregator = aggregator or tff.aggregators.MeanFactory()
  compose_process = (
    _compose_struct_client_work
    if isinstance(client_work, StructClientWork) or _scales(client_work)
    else tff.learning.templates.compose_learning_process
  )
  return compose_process(
    initial_model_weights_fn,
    model_distributor
    or tff.learning.templates.build_broadcast_process(weights_type),
    client_work,
    aggregator.create(weights_type.trainable, tff.TensorType(np.float32)),
    tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer, weights_type
    ),
  )


def _scales(client_work) -> bool:
  """Whether `client_work` measures `UPDATE_SCALE`, the factor of the
  aggregated update (a `learning.ClientDefinition` whose clients give a
  `ClientOutput.scale`: FedNova's τ_eff). TFF's composer has no step
  between the aggregator and the finalizer for it."""
  measured = client_work.next.type_signature.result.measurements.member
  return isinstance(measured, tff.StructType) and UPDATE_SCALE in (
    tff.structure.name_list(measured)
  )


def _scaled_update(update_type):
  @tff.tensorflow.computation(update_type, tff.TensorType(np.float32))
  def scaled_update(update, scale):
    return tf.nest.map_structure(lambda u: u * scale, update)

  return scaled_update


def _compose_struct_client_work(
  initial_model_weights_fn, distributor, client_work, aggregator, finalizer
):
  """TFF's `compose_learning_process`, computation for computation, for a
  `StructClientWork`, whose client data are not sequences (TFF's composer
  requires them): the same state, hyper-parameters and metrics, so that a
  compiled or stored-input run's checkpoints are the per-client run's.
  Also for a client work that measures an update scale (`_scales`): the
  aggregated update is multiplied by it before the finalizer steps."""
  state_of = tff.learning.templates.LearningAlgorithmState
  scaled = _scales(client_work)

  @tff.federated_computation()
  def init_fn():
    return tff.federated_zip(
      state_of(
        tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        distributor.initialize(),
        client_work.initialize(),
        aggregator.initialize(),
        finalizer.initialize(),
      )
    )

  @tff.federated_computation(
    init_fn.type_signature.result, client_work.next.type_signature.parameter[2]
  )
  def next_fn(state, client_data):
    distributed = distributor.next(
      state.distributor, state.global_model_weights
    )
    trained = client_work.next(
      state.client_work, distributed.result, client_data
    )
    aggregated = aggregator.next(
      state.aggregator, trained.result.update, trained.result.update_weight
    )
    update = aggregated.result
    if scaled:
      update = tff.federated_map(
        _scaled_update(update.type_signature.member),
        (update, getattr(trained.measurements, UPDATE_SCALE)),
      )
    finalized = finalizer.next(
      state.finalizer, state.global_model_weights, update
    )
    return tff.learning.templates.LearningProcessOutput(
      tff.federated_zip(
        state_of(
          finalized.result,
          distributed.state,
          trained.state,
          aggregated.state,
          finalized.state,
        )
      ),
      tff.federated_zip(
        collections.OrderedDict(
          distributor=distributed.measurements,
          client_work=trained.measurements,
          aggregator=aggregated.measurements,
          finalizer=finalized.measurements,
        )
      ),
    )

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_model_weights_fn(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights_fn(state, model_weights):
    return state_of(
      model_weights,
      state.distributor,
      state.client_work,
      state.aggregator,
      state.finalizer,
    )

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return collections.OrderedDict(
      client_work=client_work.get_hparams(state.client_work),
      finalizer=finalizer.get_hparams(state.finalizer),
    )

  @tff.tensorflow.computation(state_type, get_hparams_fn.type_signature.result)
  def set_hparams_fn(state, hparams):
    return state_of(
      state.global_model_weights,
      state.distributor,
      client_work.set_hparams(state.client_work, hparams['client_work']),
      state.aggregator,
      finalizer.set_hparams(state.finalizer, hparams['finalizer']),
    )

  return tff.learning.templates.LearningProcess(
    init_fn,
    next_fn,
    get_model_weights_fn,
    set_model_weights_fn,
    get_hparams_fn=get_hparams_fn,
    set_hparams_fn=set_hparams_fn,
  )


def weighting_and_aggregator(
  client_weighting,
  default_weighting,
  model_aggregator,
) -> tuple[
  tff.learning.ClientWeighting, tff.aggregators.WeightedAggregationFactory
]:
  """The client weighting and the weighted model aggregator, as TFF's
  builders take them: None → `tff.aggregators.MeanFactory()`; an unweighted
  factory (`tff.learning.dp_aggregator`, `secure_aggregator(weighted=
  False)`) is wrapped by `tff.aggregators.as_weighted_aggregator` and makes
  the clients' weights uniform (TFF's `build_unweighted_*` builders);
  `client_weighting` None → `default_weighting` (the paper's)."""
  if model_aggregator is None:
    model_aggregator = tff.aggregators.MeanFactory()
  if isinstance(model_aggregator, tff.aggregators.UnweightedAggregationFactory):
    if (
      client_weighting is not None and as_weighting(client_weighting) != UNIFORM
    ):
      raise ValueError(
        f'an unweighted model_aggregator ({type(model_aggregator).__name__}) '
        f'ignores the client weights; client_weighting={client_weighting!r} '
        'needs a weighted one (or leave client_weighting out: uniform)'
      )
    return UNIFORM, tff.aggregators.as_weighted_aggregator(model_aggregator)
  if not isinstance(
    model_aggregator, tff.aggregators.WeightedAggregationFactory
  ):
    raise TypeError(
      'model_aggregator must be a tff.aggregators.'
      'WeightedAggregationFactory or UnweightedAggregationFactory'
      f', got {type(model_aggregator).__name__}'
    )
  return (
    as_weighting(
      client_weighting if client_weighting is not None else default_weighting
    ),
    model_aggregator,
  )


def _check_blocks(server_optimizer, model_distributor, metrics_aggregator):
  """TypeError for a building block of the wrong kind, naming it."""
  if not isinstance(server_optimizer, tff.learning.optimizers.Optimizer):
    raise TypeError(
      'server_optimizer_fn must be a tff.learning.optimizers.'
      f'Optimizer, got {type(server_optimizer).__name__}'
    )
  if model_distributor is not None and not isinstance(
    model_distributor, tff.learning.templates.DistributionProcess
  ):
    raise TypeError(
      'model_distributor must be a tff.learning.templates.'
      'DistributionProcess, got '
      f'{type(model_distributor).__name__}'
    )
  if metrics_aggregator is not None and not callable(metrics_aggregator):
    raise TypeError(
      'metrics_aggregator must be a function of (metric '
      'finalizers, metrics type), e.g. tff.learning.metrics.'
      'sum_then_finalize'
    )


def build_process(
  model_fn: ModelFn,
  build_client_work: Callable[..., tff.learning.templates.ClientWorkProcess],
  server_optimizer: tff.learning.optimizers.Optimizer,
  *,
  client_weighting=None,
  default_weighting='num_examples',
  client_input: ClientInput | None = None,
  model_distributor: tff.learning.templates.DistributionProcess | None = None,
  model_aggregator: ModelAggregator | None = None,
  metrics_aggregator: MetricsAggregator | None = None,
  report_update_spread: bool = False,
) -> tff.learning.templates.LearningProcess:
  """The learning process of one algorithm: the core all builders share.

  Args:
    model_fn: builds a `tff.learning.models.VariableModel`; or a
      `tff.learning.models.FunctionalModel` (trained as a VariableModel of
      the same weights and loss would be); else a TypeError.
    build_client_work: `build_client_work(model_fn, client_weighting=,
      client_input=, metrics_aggregator=, report_update_squared_norm=)` →
      the client work (e.g. `functools.partial(
      learning.build_proximal_sgd_client_work, optimizer=..., mu=...)`).
    server_optimizer: the finalizer's optimizer, applied to the aggregated
      update w_t − w_k (SGD at 1: model averaging).
    client_weighting: 'num_examples', 'uniform' or a
      `tff.learning.ClientWeighting`; None: `default_weighting`, or uniform
      with an unweighted `model_aggregator`.
    default_weighting: the algorithm's weighting.
    client_input: `ScheduledInput()` (the default: simulation) or
      `DatasetInput(epochs)` (production: a tf.data.Dataset per client).
    model_distributor: a `tff.learning.templates.DistributionProcess`
      (default: TFF's broadcast).
    model_aggregator: a weighted or unweighted `tff.aggregators` factory
      (default: the weighted mean), e.g. TFF's DP or secure aggregator.
    metrics_aggregator: aggregates everything else the clients report
      (default `tff.learning.metrics.sum_then_finalize`; with secure
      aggregation, `tff.learning.metrics.secure_sum_then_finalize`).
    report_update_spread: also report metrics['client_work']
      ['update_spread'] = (1/K)Σ_k‖u_k − ū‖² (`measurements`).

  Returns:
    A `tff.learning.templates.LearningProcess`; with a `ComputedInput`, a
    `ComputedProcess`.
  """
  given_model_fn = model_fn
  model_fn = model_ops.variable_model_fn(model_fn)
  _check_blocks(server_optimizer, model_distributor, metrics_aggregator)
  if isinstance(client_input, ComputedInput) and model_distributor:
    raise ComputedUnavailable(
      'the process has a model_distributor of its '
      'own: its clients may not receive w_t'
    )
  weighting, aggregator = weighting_and_aggregator(
    client_weighting, default_weighting, model_aggregator
  )
  client_work = build_client_work(
    model_fn,
    client_weighting=weighting,
    client_input=client_input or ScheduledInput(),
    metrics_aggregator=metrics_aggregator,
    report_update_squared_norm=report_update_spread,
  )
  if report_update_spread:
    aggregator = measurements.measure_uniform_mean(
      aggregator, weighting == UNIFORM
    )
  process = compose(
    model_fn, client_work, server_optimizer, aggregator, model_distributor
  )
  if report_update_spread:
    process = measurements.with_update_spread(process)
  if isinstance(client_input, ComputedInput):
    return ComputedProcess(
      process,
      given_model_fn,
      client_work.local_training,
      mean_of_updates=model_aggregator is None
      and metrics_aggregator is None
      and (not report_update_spread or weighting == UNIFORM),
    )
  return process


class ComputedUnavailable(ValueError):
  """The process cannot take its clients' results computed outside it."""


class ComputedProcess(tff.learning.templates.LearningProcess):
  """A learning process built with `ComputedInput`: its clients' results
  come computed (`simulation.compiled`), each client training `model_fn`'s
  model from the global model w_t, as `local_training` says. Its state
  is that of the same algorithm built with `ScheduledInput`.

  `mean_of_updates`: its model aggregator is TFF's weighted mean and its
  metrics aggregator sums, and it measures no spread that needs each
  client's update apart: a round's clients may come as one input, their
  updates' weighted mean with the sum of their weights, statistics and
  metrics (what the mean and the sums make of them all the same)."""

  def __init__(self, process, model_fn, local_training, mean_of_updates=False):
    super().__init__(
      process.initialize,
      process.next,
      process.get_model_weights,
      process.set_model_weights,
      get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams,
    )
    self.model_fn = model_fn
    self.local_training = local_training
    self.mean_of_updates = mean_of_updates


def model_weights(process: tff.learning.templates.LearningProcess, state):
  """`process.get_model_weights(state)`: read from `state` in Python when
  the computation only hands back the state's `global_model_weights` (TFF's
  composed processes, and every process built here), else run it (a TFF
  call: milliseconds a round)."""
  if _returns_global_model_weights(process.get_model_weights) and isinstance(
    getattr(state, 'global_model_weights', None),
    tff.learning.models.ModelWeights,
  ):
    return state.global_model_weights
  return process.get_model_weights(state)


def _returns_global_model_weights(computation) -> bool:
  """Whether `computation` is a TensorFlow computation of a state whose
  result is its parameter's `global_model_weights`, tensor for tensor,
  through Identity ops only (read from its serialized graph)."""
  parameter = computation.type_signature.parameter
  if not isinstance(parameter, tff.StructType):
    return False
  names = [name for name, _ in tff.structure.iter_elements(parameter)]
  if 'global_model_weights' not in names or (
    computation.type_signature.result
    != parameter[names.index('global_model_weights')]
  ):
    return False
  proto = tff.framework.serialize_computation(computation)
  if proto.WhichOneof('computation') != 'tensorflow':
    return False
  graph = tf.compat.v1.GraphDef()
  proto.tensorflow.graph_def.Unpack(graph)
  nodes = {node.name: node for node in graph.node}

  def source(tensor_name):
    name = tensor_name.split(':')[0]
    while name in nodes and nodes[name].op == 'Identity':
      name = nodes[name].input[0].split(':')[0]
    return name

  binding = proto.tensorflow.parameter.struct.element
  wanted = _tensor_names(binding[names.index('global_model_weights')])
  given = _tensor_names(proto.tensorflow.result)
  return len(wanted) == len(given) and all(
    nodes.get(source(g)) is not None
    and nodes[source(g)].op == 'Placeholder'
    and source(g) == w.split(':')[0]
    for g, w in zip(given, wanted)
  )


def _tensor_names(binding) -> list[str]:
  kind = binding.WhichOneof('binding')
  if kind == 'tensor':
    return [binding.tensor.tensor_name]
  if kind == 'struct':
    return [n for e in binding.struct.element for n in _tensor_names(e)]
  return [kind]  # A sequence: not a tensor of the state.


def initial_model_weights(model_fn: ModelFn, seed: int):
  """The model's freshly initialized weights, a function of `seed` only (a
  `tff.learning.models.FunctionalModel`'s are its fixed initial weights)."""
  tf.keras.utils.set_random_seed(seed)
  model = model_ops.variable_model_fn(model_fn)()
  return tf.nest.map_structure(
    lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model)
  )
