"""The content fingerprint of TFF computations: what a run records of what
it trained with.

A run folder records the SHA-256 of its learning process's computations, so
that whatever shaped them (our code, a user's modules, a data or config
file the model reads, an environment variable, Keras's global settings)
is part of the run's identity, without knowing where it came from. Two
builds of the same code serialize to the same bytes except for the names
TensorFlow gives the functions it traces, which carry a counter global to
the process (`__inference_train_563` in one build, `__inference_train_1512`
in the next; measured on FedProx's `next`). The fingerprint renames them by
the order in which a walk of the computation first reaches them, so it is
a function of the computation's content alone. (The initializers' random
seeds are fixed by building under `tracing.deterministic`.)

Its reason is a run's identity (a resume or a sweep summary never mixes
runs of other code), not time, memory or security: no figure in
docs/PERFORMANCE.md or the README concerns it.
"""

import hashlib
import re

from google.protobuf import message as message_lib
from tensorflow.core.framework import graph_pb2
from tensorflow_federated.proto.v0 import computation_pb2


def _strings(message):
  """Every string or bytes value in `message` and its sub-messages, in
  field order (the references a walk of a graph meets)."""
  for field, value in message.ListFields():
    values = value if field.label == field.LABEL_REPEATED else [value]
    if (
      field.message_type is not None
      and field.message_type.GetOptions().map_entry
    ):
      values = [value[key] for key in sorted(value)]
      if field.message_type.fields_by_name['value'].message_type is None:
        yield from values
        continue
    for item in values:
      if isinstance(item, message_lib.Message):
        yield from _strings(item)
      elif isinstance(item, (str, bytes)):
        yield item


def _rename(message, rename):
  """Applies `rename` (str → str) in place to every string value of
  `message` and its sub-messages (bytes values are decoded as UTF-8 when
  they can be)."""

  def renamed(value):
    if isinstance(value, bytes):
      try:
        return rename(value.decode('utf-8')).encode('utf-8')
      except UnicodeDecodeError:
        return value
    return rename(value)

  for field, value in message.ListFields():
    if field.message_type is not None and (
      field.message_type.GetOptions().map_entry
    ):
      for key in list(value):
        if field.message_type.fields_by_name['value'].message_type is None:
          value[key] = renamed(value[key])
        else:
          _rename(value[key], rename)
    elif field.message_type is not None:
      for item in value if field.label == field.LABEL_REPEATED else [value]:
        _rename(item, rename)
    elif field.type not in (field.TYPE_STRING, field.TYPE_BYTES):
      continue
    elif field.label == field.LABEL_REPEATED:
      value[:] = [renamed(item) for item in value]
    else:
      setattr(message, field.name, renamed(value))


def _canonical_graph(graph_def, prefixed=False):
  """`graph_def` with its function library's names replaced by their order
  of first reference (from the graph's nodes, then into each function's
  body). With `prefixed`, also where a name follows an underscore (a
  while loop's names derived from its condition's: `while_cond_555___
  redundant_placeholder0`)."""
  functions = {f.signature.name: f for f in graph_def.library.function}
  order = {}

  def visit(message):
    for text in _strings(message):
      name = (
        text.decode('utf-8', 'replace') if isinstance(text, bytes) else text
      )
      if name in functions and name not in order:
        order[name] = f'function_{len(order)}'
        visit(functions[name])

  for node in graph_def.node:
    visit(node)
  for name in sorted(functions, key=lambda n: n.rstrip('0123456789')):
    if name not in order:  # Reached by no reference (kept anyway).
      order[name] = f'function_{len(order)}'
      visit(functions[name])
  if order:  # A name also prefixes names derived from it (an argument's).
    before = '(?<![0-9A-Za-z])' if prefixed else '(?<![0-9A-Za-z_])'
    pattern = re.compile(
      before
      + '('
      + '|'.join(re.escape(n) for n in sorted(order, key=len, reverse=True))
      + ')(?![0-9])'
    )
    _rename(
      graph_def,
      lambda text: pattern.sub(lambda match: order[match.group(1)], text),
    )
  graph_def.library.function.sort(key=lambda f: f.signature.name)
  return graph_def


def _canonical(computation):
  """A copy of the `computation_pb2.Computation` with every TensorFlow
  graph in canonical form."""
  computation = computation_pb2.Computation.FromString(
    computation.SerializeToString()
  )

  def walk(message):
    for field, value in message.ListFields():
      if field.message_type is None:
        continue
      for item in value if field.label == field.LABEL_REPEATED else [value]:
        if isinstance(item, computation_pb2.TensorFlow):
          graph_def = graph_pb2.GraphDef()
          item.graph_def.Unpack(graph_def)
          item.graph_def.Pack(_canonical_graph(graph_def))
          item.ClearField('cache_key')  # An id, not content.
        elif isinstance(item, message_lib.Message):
          walk(item)

  walk(computation)
  return computation


def sha256(*computations) -> str:
  """The SHA-256 of TFF computations' content (`tff.Computation`s),
  independent of the names TensorFlow's process-wide counters gave their
  functions."""
  import tensorflow_federated as tff

  digest = hashlib.sha256()
  for computation in computations:
    proto = _canonical(tff.framework.serialize_computation(computation))
    data = proto.SerializeToString(deterministic=True)
    digest.update(len(data).to_bytes(8, 'little'))
    digest.update(data)
  return digest.hexdigest()


def graph_sha256(graph_def) -> str:
  """The SHA-256 of a TensorFlow graph's content (a `GraphDef`, e.g. a
  traced `tf.function`'s), its function names canonical as above."""
  canonical = _canonical_graph(
    graph_pb2.GraphDef.FromString(graph_def.SerializeToString()), prefixed=True
  )
  return hashlib.sha256(
    canonical.SerializeToString(deterministic=True)
  ).hexdigest()
