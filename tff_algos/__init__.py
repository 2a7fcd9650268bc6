"""Federated optimization algorithms as TFF learning processes.

The builders (`build_fed_avg`, `build_fed_sgd`, `build_fed_prox`,
`build_fed_isgd`) are imported on first use, so that `tff_algos.config` can
validate a run without loading TensorFlow.
"""

import importlib

_BUILDERS = dict(build_fed_avg='fedavg', build_fed_sgd='fedsgd',
                 build_fed_prox='fedprox', build_fed_isgd='fedisgd')


def __getattr__(name):
  if name in _BUILDERS:
    module = importlib.import_module(f'tff_algos.{_BUILDERS[name]}')
    return getattr(module, name)
  raise AttributeError(f'module tff_algos has no attribute {name!r}')
