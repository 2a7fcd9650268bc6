"""Installable packages `tff_algos` (algorithms and their harness) and `tasks`
(data + models).

Version pins live in requirements.txt only; `make install` applies them
(tensorflow-federated needs --no-deps there, see that file).
"""

import setuptools

setuptools.setup(
  name='tff-algos',
  version='0.2.0',
  description='FedAvg, FedSGD, FedProx and FedISGD on TensorFlow Federated',
  python_requires='>=3.11,<3.12',
  packages=setuptools.find_packages(
    include=['tff_algos', 'tff_algos.*', 'tasks']
  ),
  package_data={'tff_algos.runtime': ['loopback_bind.c']},
  install_requires=[
    'tensorflow',
    'tensorflow-federated',
    'tensorflow-datasets',
    'numpy',
    'absl-py',
    'tqdm',
  ],
)
