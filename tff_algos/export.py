"""Exports an algorithm as serialized TFF computations for a production port.

  python -m tff_algos.export --algo=fedisgd --task=synthetic_1_1 --out=DIR \\
      [--epochs=20 --client_lr=0.01 --mu=1 ...] [--build=simulation]

Writes to DIR (which must be empty or new):
  initialize.pb, next.pb                   the learning process
  map_reduce_form/<part>.pb                its tff.backends.mapreduce.MapReduceForm
  distribute_aggregate_form/<part>.pb      its DistributeAggregateForm
  manifest.json                            part → file and type signature,
                                           the algorithm and its settings
Each .pb is a serialized `computation_pb2.Computation`; read one back with
`tff.framework.deserialize_computation(Computation.FromString(bytes))`.
The production build (the default) takes per client a tf.data.Dataset of
the model's batches (docs/PORTING.md). The task gives the model (its data
are loaded for that). Bad flags: one line on stderr, exit code 2.
"""

import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from absl import flags  # pylint: disable=g-import-not-at-top

from tff_algos import cli  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
cli.define_algorithm_flags()
cli.define_data_flags()
flags.DEFINE_string('out', None, 'The folder to write (empty or new).')
flags.DEFINE_enum('build', 'production', ['production', 'simulation'],
                  'production: clients hold a tf.data.Dataset of batches '
                  '(running --epochs passes); simulation: the scheduled '
                  'client input of run_experiment.py.')
DESCRIPTION = ('Write an algorithm\'s TFF computations (initialize, next) and '
               'the parts of their MapReduceForm and DistributeAggregateForm '
               'as serialized computations, with a manifest.json.')
# The parts of each form, as TFF 0.87 names them.
MAP_REDUCE_PARTS = ('prepare', 'work', 'zero', 'accumulate', 'merge', 'report',
                    'secure_sum_bitwidth', 'secure_sum_max_input',
                    'secure_modular_sum_modulus', 'update')
DISTRIBUTE_AGGREGATE_PARTS = ('server_prepare', 'server_to_client_broadcast',
                              'client_work', 'client_to_server_aggregation',
                              'server_result')


def forms(process):
  """{form name: {part: computation}} of a learning process's `next`."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  mapreduce = tff.backends.mapreduce
  map_reduce = mapreduce.get_map_reduce_form_for_computation(process.next)
  distribute_aggregate = mapreduce.get_distribute_aggregate_form_for_computation(
      process.next)
  return {
      'map_reduce_form': {p: getattr(map_reduce, p) for p in MAP_REDUCE_PARTS},
      'distribute_aggregate_form': {
          p: getattr(distribute_aggregate, p)
          for p in DISTRIBUTE_AGGREGATE_PARTS},
  }


def export(process, out, metadata):
  """Writes `process` and its forms' parts to `out`; returns the manifest."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  parts = {'initialize': process.initialize, 'next': process.next}
  for form, computations in forms(process).items():
    parts.update({f'{form}/{name}': c for name, c in computations.items()})
  manifest = dict(metadata, computations={})
  for name, computation in parts.items():
    path = os.path.join(out, f'{name}.pb')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
      f.write(tff.framework.serialize_computation(
          computation).SerializeToString())
    manifest['computations'][name] = dict(
        file=os.path.relpath(path, out),
        type_signature=str(computation.type_signature))
  with open(os.path.join(out, 'manifest.json'), 'w') as f:
    json.dump(manifest, f, indent=2)
  return manifest


def main(argv):
  if cli.wants_help(argv):
    print(cli.usage('python -m tff_algos.export', DESCRIPTION))
    return 0
  try:
    rest = FLAGS(argv)
  except flags.Error as e:
    cli.error(e)
  try:
    if len(rest) > 1:
      raise cli.UsageError(f'unexpected arguments: {" ".join(rest[1:])}')
    if not FLAGS.out:
      raise cli.UsageError('--out is required: the folder to write')
    if os.path.exists(FLAGS.out) and (not os.path.isdir(FLAGS.out) or
                                      os.listdir(FLAGS.out)):
      raise cli.UsageError(f'--out={FLAGS.out} exists and is not an empty '
                           'folder')
    cli.check_task()
    config = cli.config_from_flags().resolved()
  except cli.UsageError as e:
    cli.error(e)
  from tff_algos import learning  # pylint: disable=g-import-not-at-top
  from tff_algos import runtime  # pylint: disable=g-import-not-at-top
  runtime.install()
  task = cli.load_task_or_exit(config, cli.task_options())
  runtime.start()  # TFF's own default context would leave a worker behind.
  production = FLAGS.build == 'production'
  client_input = (learning.DatasetInput(epochs=config.epochs or 1)
                  if production else learning.ScheduledInput())
  try:
    process = config.algorithm.build(task.model_fn, config, client_input)
    manifest = export(process, FLAGS.out, dict(
        algorithm=config.algo, paper=config.algorithm.paper,
        build=FLAGS.build, task=config.task, model=task.description,
        client_data=(f'per client a tf.data.Dataset of the model\'s batches; '
                     f'{client_input.epochs} local epochs' if production else
                     'per client [OrderedDict(data, example_order, '
                     'batch_ends)] (tff_algos.simulation)'),
        settings={k: v for k, v in config.to_json().items()
                  if k in config.algorithm.hparams or k in ('algo', 'hparams')
                  }))
  finally:
    runtime.stop()
  width = max(len(name) for name in manifest['computations'])
  for name, part in manifest['computations'].items():
    print(f'{name:{width}s}  {part["type_signature"]}')
  print(f'wrote {len(manifest["computations"])} computations and '
        f'manifest.json to {FLAGS.out}', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
