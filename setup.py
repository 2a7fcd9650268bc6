"""Installable packages `tff_algos` (algorithms) and `tasks` (data + models).

Version pins live in requirements.txt only; `make install` applies them
(tensorflow-federated needs --no-deps there, see that file).
"""

import setuptools

setuptools.setup(
    name='tff-algos',
    version='0.1.0',
    description='FedAvg, FedSGD, FedProx and FedISGD on TensorFlow Federated',
    python_requires='>=3.11,<3.12',
    packages=['tff_algos', 'tasks'],
    package_data={'tff_algos': ['loopback_bind.c']},
    install_requires=[
        'tensorflow', 'tensorflow-federated', 'tensorflow-datasets', 'numpy',
        'absl-py', 'tqdm',
    ],
)
