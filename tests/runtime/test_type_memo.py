"""TFF's type deserialization, remembered by the type's bytes, returns the
very object TFF's own returns (TFF interns its types)."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

import helpers
from tff_algos import learning
from tff_algos.algorithms import fedprox
from tff_algos.runtime import type_memo

TYPES = {
  'tensor': tff.TensorType(np.float32, [None, 4]),
  'named struct': tff.StructType(
    [('w', tff.TensorType(np.float32, [4])), ('b', tff.TensorType(np.int64))]
  ),
  'unnamed struct': tff.StructType([tff.TensorType(np.int32)] * 2),
  'sequence': tff.SequenceType(
    collections.OrderedDict(
      x=tff.TensorType(np.float32, [None, 60]),
      y=tff.TensorType(np.int32, [None]),
    )
  ),
  'federated': tff.FederatedType(tff.TensorType(np.float32), tff.CLIENTS),
  'function': tff.FunctionType(
    tff.TensorType(np.float32), tff.TensorType(np.bool_)
  ),
}


def _memoized():
  memoized = type_memo.deserializer()
  assert getattr(memoized, 'memoized', False)  # The runtime installed it.
  return memoized


@pytest.mark.fast
@pytest.mark.parametrize('name', sorted(TYPES))
def test_each_kind_of_type_comes_back_as_tffs_own_object(name):
  memoized = _memoized()
  proto = tff.types.serialize_type(TYPES[name])
  first = memoized(proto)
  assert first is memoized.__wrapped__(proto)  # Interned by TFF.
  assert first.is_equivalent_to(TYPES[name])  # Python containers aside.
  assert memoized(proto) is first  # From the memo.


def test_a_learning_process_type_round_trips():
  process = fedprox.build_fed_prox(
    helpers.task_and_arrays()[0].model_fn,
    0.1,
    mu=0.1,
    client_input=learning.DatasetInput(1),
  )
  memoized = _memoized()
  for signature in (
    process.initialize.type_signature,
    process.next.type_signature,
  ):
    proto = tff.types.serialize_type(signature)
    assert memoized(proto) is memoized.__wrapped__(proto)
    assert memoized(proto).is_equivalent_to(signature)


@pytest.mark.fast
def test_a_value_that_is_no_proto_gets_tffs_own_error():
  memoized = _memoized()
  with pytest.raises(Exception) as theirs:
    memoized.__wrapped__('not a type')
  with pytest.raises(theirs.type):
    memoized('not a type')
