"""Prints docs/PRIVACY.md's ε cross-check table: the accountant
(`tff_algos.privacy.accounting`) against the independent computations
of tests/privacy/test_accounting.py, on a grid of (q, z, T), δ = 1e-5.

  .venv/bin/python tools/privacy_crosscheck.py
"""

import itertools
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, 'tests', 'privacy')]
sys.path.append(os.path.join(_ROOT, 'tests'))  # Their conftest.

from dp_accounting import rdp  # noqa: E402
import test_accounting as independent  # noqa: E402

from tff_algos.privacy import accounting  # noqa: E402

DELTA, NUM_CLIENTS = 1e-5, 300


def main():
  orders = rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
  integer_orders = [int(o) for o in orders if float(o).is_integer() and o >= 2]
  print(
    '| q | z | T | Poisson: ours | Poisson: closed form | '
    'uniform (replace-one): ours | uniform: Thm. 27 bound |'
  )
  print('|---|---|---|---|---|---|---|')
  for k, z, rounds in itertools.product(
    (3, 30, 100), (0.5, 1.0, 2.0), (1, 100, 1000)
  ):
    q = k / NUM_CLIENTS
    ours = {
      s: accounting.epsilons(
        z,
        rounds,
        DELTA,
        num_clients=NUM_CLIENTS,
        clients_per_round=k,
        sampling=s,
      )[-1]
      for s in ('poisson', 'uniform')
    }
    poisson = independent._epsilon_from_rdp(
      orders,
      rounds * independent._poisson_rdp_at_default_orders(q, z),
      DELTA,
    )
    uniform = independent._epsilon_from_rdp(
      integer_orders,
      [
        rounds * independent._sampled_without_replacement_rdp_bound(q, z, a)
        for a in integer_orders
      ],
      DELTA,
    )
    print(
      f'| {q:.3g} | {z:g} | {rounds} | {ours["poisson"]:.4f} | '
      f'{poisson:.4f} | {ours["uniform"]:.4f} | {uniform:.4f} |'
    )


if __name__ == '__main__':
  main()
