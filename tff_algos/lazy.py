"""Modules imported on first use.

The algorithm modules import TensorFlow this way, so that the registry
(`tff_algos.algorithms`) loads in milliseconds: `run_experiment.py --help`
and the validation of a run's settings happen before TensorFlow is loaded.
"""

import importlib
import types


class _Module(types.ModuleType):
  def __getattr__(self, attribute):
    return getattr(importlib.import_module(self.__name__), attribute)


def module(name: str) -> types.ModuleType:
  """A stand-in for module `name` that imports it when first used."""
  return _Module(name)
