"""TFF's program layer on our runtime: train_model runs our
production FedProx with checkpoints, stops, resumes, and ends at the model
the process reaches driven by hand on the same clients and batches."""

import asyncio
import copy

import psutil
import pytest
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import fedprox
from tff_algos.program import data_source

CLIENTS, BATCH, SEED = 4, 10, 3


def _workers():
  return {
    p.pid
    for p in psutil.Process().children(recursive=True)
    if p.name() == 'worker_binary'
  }


@pytest.mark.slow
def test_train_model_checkpoints_stops_resumes_and_matches_the_process(
  tmp_path,
):
  task, _ = helpers.task_and_arrays()
  process = fedprox.build_fed_prox(
    task.model_fn, 0.05, mu=0.5, client_input=learning.DatasetInput(2)
  )
  initial = process.set_model_weights(
    process.initialize(), learning.initial_model_weights(task.model_fn, 0)
  )
  workers = _workers()

  def program(total_rounds):
    """A fresh program (data source, managers) that trains to
    `total_rounds`: what a restarted job does."""
    source = data_source.ClientDataSource(task.train, BATCH, seed=SEED)
    models, metrics = (
      tff.program.MemoryReleaseManager(),
      tff.program.MemoryReleaseManager(),
    )
    with runtime.program_context():
      asyncio.run(
        tff.learning.programs.train_model(
          train_process=process,
          initial_train_state=initial,
          train_data_source=source,
          train_per_round_clients=CLIENTS,
          train_total_rounds=total_rounds,
          program_state_manager=tff.program.FileProgramStateManager(
            str(tmp_path / 'state')
          ),
          model_output_manager=models,
          train_metrics_manager=metrics,
          evaluation_manager=None,
          evaluation_periodicity=100,
        )
      )
    return source, models.values(), metrics.values()

  _, _, first = program(2)  # Stopped after round 2...
  source, models, resumed = program(3)  # ...and resumed: round 3 only.
  assert sorted(first) == [1, 2] and sorted(resumed) == [3]
  trained = models['training_checkpoint_round_3']

  by_hand = initial
  for round_num in range(1, 4):
    by_hand = process.next(
      by_hand, [source.dataset(c) for c in source.clients(round_num, CLIENTS)]
    ).state
  difference = helpers.max_abs_diff(
    process.get_model_weights(by_hand), process.get_model_weights(trained)
  )
  assert difference == 0
  assert (
    helpers.max_abs_diff(
      process.get_model_weights(initial), process.get_model_weights(trained)
    )
    > 1e-3
  )
  assert _workers() == workers  # The same worker: none started or left.


@pytest.mark.fast
def test_the_iterator_is_copied_and_saved_without_its_data():
  task, _ = helpers.task_and_arrays()
  source = data_source.ClientDataSource(task.train, BATCH, seed=SEED)
  iterator = source.iterator()
  iterator.select(CLIENTS)
  copied = copy.deepcopy(iterator)
  restored = data_source.ClientDataIterator.from_bytes(iterator.to_bytes())
  assert copied == iterator == restored
  second = [
    list(d.as_numpy_iterator())[0]['y'].tolist()
    for d in restored.select(CLIENTS)
  ]
  assert second == [
    list(d.as_numpy_iterator())[0]['y'].tolist() for d in copied.select(CLIENTS)
  ]
  assert source.clients(2, CLIENTS) != source.clients(1, CLIENTS)
  other = data_source.ClientDataSource(task.train, BATCH, seed=SEED + 1)
  assert other.key != source.key
  with pytest.raises(ValueError, match='create the same ClientDataSource'):
    data_source.ClientDataIterator.from_bytes(
      b'{"source": "no such source", "selections": 1}'
    )
