"""docs/PORTING.md's worked example: FedProx on standard TFF client data.

  .venv/bin/python docs/porting_example.py

Builds the production flavour of FedProx (Li et al. 2020, Algorithm 2) for
the Synthetic(1,1) task's model, trains it on a TFF `ClientData`'s
per-client tf.data datasets, changes μ between rounds, compiles the round
to a form a TFF production backend runs, and exports it as serialized
computations that TFF reads back. The test suite runs
this file (tests/programs/test_porting.py) and checks that every code block
of docs/PORTING.md is a part of it.
"""

import os
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

import tasks
from tff_algos import export
from tff_algos import learning
from tff_algos import runtime
from tff_algos.algorithms import fedprox

runtime.start()  # This repository's local TFF runtime (README).

# 1. The builder: the algorithm's, with the production client input.
task = tasks.load_task('synthetic_1_1')  # A ClientData and a model_fn.
process = fedprox.build_fed_prox(
    task.model_fn, client_learning_rate=0.01, mu=1.0,
    client_input=learning.DatasetInput(epochs=20))

# 2. The client data contract: per client, a tf.data.Dataset of the model's
# batches (x float32[B, 60], y int32[B]); each client counts its own n_k.
clients = task.train.client_ids[:10]
client_data = [task.train.create_tf_dataset_for_client(c).batch(10)
               for c in clients]

state = process.initialize()
losses = []
for round_num in range(1, 4):
  output = process.next(state, client_data)
  state = output.state
  train = output.metrics['client_work']['train']
  losses.append(train['loss'])
  print(f'round {round_num}: local training loss {train["loss"]:.4f} '
        f'over {train["num_examples"]} examples')
assert losses[-1] < losses[0]

# 3. μ is a hyper-parameter of the process state: no rebuild to change it.
hparams = process.get_hparams(state)
print('client work hyper-parameters:', dict(hparams['client_work']))
hparams['client_work']['mu'] = 0.1
state = process.set_hparams(state, hparams)
assert abs(process.get_hparams(state)['client_work']['mu'] - 0.1) < 1e-7

# 4. The forms a production backend takes.
map_reduce = tff.backends.mapreduce.get_map_reduce_form_for_computation(
    process.next)
print('MapReduceForm work:', map_reduce.work.type_signature)

# 5. Exported (what `python -m tff_algos.export` writes) and read back.
out = tempfile.mkdtemp()
manifest = export.export(process, out, metadata={})
with open(os.path.join(out, 'next.pb'), 'rb') as f:
  next_fn = tff.framework.deserialize_computation(
      computation_pb2.Computation.FromString(f.read()))
assert next_fn.type_signature.is_equivalent_to(process.next.type_signature)
print(f'{len(manifest["computations"])} computations in {out}')
runtime.stop()
