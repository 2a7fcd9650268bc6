"""TFF's type deserialization, remembered by the bytes of the type.

TFF 0.87 turns a computation's protocol buffer back into building blocks
each time it compiles, transforms or inspects it (`to_building_block`; the
MapReduceForm and DistributeAggregateForm transformations; the executors'
value deserialization), and deserializes the type of every node anew: in
the production-argument tests, 4.3 million calls to `deserialize_type`
took 62 of their 232 profiled seconds. With the memo, those tests took
148 s instead of 173 s, and the whole suite 858 s instead of 944 s of
pytest's time (2 processes, nothing else running; docs/PERFORMANCE.md).

TFF's types are interned (`computation_types._Intern`: equal construction
arguments give the very same object, and the pool is emptied only at
exit), so the type a proto deserializes to is a function of the proto's
bytes alone, and a memo keyed by those bytes returns the object TFF itself
returns. TFF keeps the memo in the other direction
(`type_serialization._type_serialization_cache`).
"""

import functools

from tensorflow_federated.python.core.impl.types import type_serialization


def install() -> None:
  """Replaces `type_serialization.deserialize_type`, the name TFF calls it
  by (its recursion too), with the memoized one; once per process."""
  original = type_serialization.deserialize_type
  if getattr(original, 'memoized', False):
    return
  memo = {}

  @functools.wraps(original)  # Its docstring; `__wrapped__` is TFF's own.
  def deserialize_type(type_proto):
    try:
      key = type_proto.SerializeToString(deterministic=True)
    except AttributeError:  # Not a proto: TFF's own error.
      return original(type_proto)
    found = memo.get(key)
    if found is None:
      found = memo[key] = original(type_proto)
    return found

  deserialize_type.memoized = True
  type_serialization.deserialize_type = deserialize_type


def deserializer():
  """The type deserialization TFF calls: memoized once `install()` ran."""
  return type_serialization.deserialize_type
