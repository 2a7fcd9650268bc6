"""Round callbacks run in the order what they read and write makes: each
after the writers of the values it requires or reads, otherwise in the
order given; a value one requires that no callback writes refuses the
run before it trains."""

import pytest

from tff_algos.algorithms import fedprox
from tff_algos.algorithms.callbacks import in_order
from tff_algos.algorithms.callbacks import RoundCallback
from tff_algos.simulation import callbacks
from tff_algos.simulation import outputs

pytestmark = pytest.mark.fast  # Few tests, each cheap: all in the fast set.


class _Writes(RoundCallback):
  def __init__(self, *values):
    self.writes = values


class _Reads(RoundCallback):
  def __init__(self, *values, required=()):
    self.reads, self.requires = values, required


def test_a_reader_runs_after_every_writer_else_in_the_given_order():
  first, second = _Writes('x'), _Writes('x')
  reader, other = _Reads('x'), _Reads('y')
  assert in_order([reader, first, other, second]) == [
    first,
    other,
    second,
    reader,
  ]
  in_place = [first, second, reader, other]
  assert in_order(in_place) == in_place


def test_adaptive_mu_runs_after_the_evaluation_it_requires():
  rule = fedprox.AdaptiveMuCallback(fedprox.AdaptiveMu(0.1))
  evaluation = callbacks.Evaluation(None, [], None, lambda r: True)
  progress = outputs.Progress({'mu': 0.1}, enabled=False)
  assert in_order([progress, rule, evaluation]) == [evaluation, rule, progress]
  with pytest.raises(ValueError, match='requires training_loss, which no'):
    in_order([rule, progress])


@pytest.mark.parametrize(
  'algo, shown', [('fedprox', ('mu',)), ('fedavg', ()), ('fedisgd', ('lam',))]
)
def test_the_progress_bar_shows_the_hyperparameters_a_run_may_change(
  algo, shown
):
  from tff_algos.simulation import config
  from tff_algos.simulation import trainer

  settings = config.resolve(config.Config.create(algo=algo))
  (bar,) = [
    c
    for c in trainer.run_outputs(settings, show_progress=False)
    if isinstance(c, outputs.Progress)
  ]
  assert bar.reads == ('training_loss', 'test_accuracy', *shown)


def test_a_value_the_loop_writes_needs_no_callback_and_a_cycle_is_refused():
  check = callbacks.DivergenceCheck()
  assert in_order([check], given=['update_non_finite']) == [check]
  with pytest.raises(ValueError, match='requires update_non_finite'):
    in_order([check])
  a, b = _Writes('a'), _Writes('b')
  a.reads, b.reads = ('b',), ('a',)
  with pytest.raises(ValueError, match='wait for each other'):
    in_order([a, b])
