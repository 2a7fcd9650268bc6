"""Many clients' tensors serialized at once (`runtime.client_values`): the
bytes TFF's own serializer writes, the same errors, and TFF's serializer
for every other value."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_algos.runtime import client_values

pytestmark = pytest.mark.fast  # Few tests, each cheap: all in the fast set.

client_values.install()  # As the runtime does when it starts.

MEMBER = tff.to_type(
  collections.OrderedDict(
    update=[
      tff.TensorType(np.float32, [3, 2]),
      tff.TensorType(np.float32, [2]),
    ],
    weight=tff.TensorType(np.float32),
    counts=[tff.TensorType(np.int64)],
    unnamed=(tff.TensorType(np.int32), tff.TensorType(np.float64)),
  )
)
CLIENTS = tff.FederatedType(MEMBER, tff.CLIENTS)


def _values(n, seed=0):
  rng = np.random.default_rng(seed)
  return [
    collections.OrderedDict(
      update=[rng.random((3, 2), np.float32), rng.random(2, np.float32)],
      weight=np.float32(k),
      counts=[np.int64(k * 7)],
      unnamed=(np.int32(k), np.float64(k / 3)),
    )
    for k in range(n)
  ]


def test_the_bytes_are_tffs():
  values = _values(5)
  theirs = client_values.tffs_serialize_clients(values, CLIENTS)
  ours = client_values.serialize_clients(values, CLIENTS)
  assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
    deterministic=True
  )
  assert client_values.serialize_value(values, CLIENTS)[0] == ours


@pytest.mark.parametrize(
  'change, message',
  [
    (
      lambda v: v['update'].__setitem__(0, np.zeros((2, 2), np.float32)),
      'shape',
    ),
    (lambda v: v.__setitem__('weight', np.int64(1)), 'dtype'),
    (lambda v: v.pop('counts'), 'keys'),
  ],
)
def test_a_value_of_another_type_is_refused(change, message):
  values = _values(2)
  change(values[1])
  with pytest.raises(TypeError, match=message):
    client_values.serialize_clients(values, CLIENTS)


def test_other_values_go_to_tffs_serializer():
  sequence = tff.FederatedType(tff.SequenceType(np.int32), tff.CLIENTS)
  proto, _ = client_values.serialize_value([[1, 2], [3]], sequence)
  assert len(proto.federated.value) == 2
  at_server = tff.FederatedType(MEMBER, tff.SERVER)
  proto, _ = client_values.serialize_value(_values(1)[0], at_server)
  assert len(proto.federated.value) == 1
