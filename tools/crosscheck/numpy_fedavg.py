"""FedAvg and FedProx from scratch in plain numpy: the cross-check of
docs/REPRODUCTION.md.

An independent implementation of the papers' algorithms, written against
the papers' text, not against this repository's code: no TensorFlow, no
TFF, no `tff_algos` and no `tasks` import (tests/commands/test_crosscheck.py
checks that). What it implements:

- the models: FedAvg's MNIST 2NN (784-200-200-10, ReLU, §3 of McMahan et
  al. 2017) and multinomial logistic regression (FedProx's Synthetic, Li et
  al. 2020 §5.1), softmax cross-entropy, Glorot-uniform weights and zero
  biases (the papers state no initialization; this is our choice, as the
  repository's Keras models');
- ClientUpdate (McMahan et al. Algorithm 1): E epochs of minibatch SGD with
  batches of B (B = ∞: the whole local dataset), each epoch a fresh
  permutation; FedProx's local objective F_k(w) + μ/2‖w − w_t‖² (its eq. 2),
  i.e. the step w ← w − η(∇ℓ(w; b) + μ(w − w_t));
- the server: w_{t+1} = Σ_k n_k w_k / Σ_k n_k over the clients whose work
  reached it (n_k: the client's number of training examples); stragglers
  (FedProx §5.2) run x ~ U{1..E−1} epochs and are dropped (FedAvg) or kept
  (FedProx);
- MNIST read from the IDX files (`<data_dir>/mnist/*.gz`), pixels / 255,
  FedAvg's IID split (100 clients × 600) and pathological non-IID split
  (sorted by label, 200 shards of 300, 2 per client);
- rounds to a target test accuracy as FedAvg §3 defines it: the
  best-so-far accuracy curve, linearly interpolated between evaluations.

Its randomness (initial weights, client selection, stragglers, minibatch
order) is its own numpy stream per seed, so its runs are not ours replayed:
they agree with ours statistically or not at all. For an exact comparison a
caller can pass the initial weights and a `schedule` (who trains, how many
epochs, which minibatches in which order) instead; the test does that with
our sampler's draws.

  python tools/crosscheck/numpy_fedavg.py mnist --split=iid --lr=0.215 \
      --clients_per_round=10 --batch_size=10 --epochs=1 --seeds=0,1,2 \
      --target=0.97 --rounds=400 --eval_every=5 --data_dir=../shared/data
  python tools/crosscheck/numpy_fedavg.py arrays --npz=PATH --lr=0.01 \
      --mu=1 --straggler_fraction=0.9 --clients_per_round=10 --epochs=20 \
      --batch_size=10 --rounds=200 --seeds=0,1,2

Each prints one JSON line per seed (and --json writes them all).
"""

import argparse
from collections.abc import Callable, Sequence
import dataclasses
import gzip
import json
import math
import os
import sys
import time

import numpy as np

F32 = np.float32


# ------------------------------------------------------------------ models
@dataclasses.dataclass(frozen=True)
class Network:
  """A fully connected ReLU network; `sizes` = (inputs, hidden..., classes).
  (784, 200, 200, 10) is FedAvg's 2NN; (60, 10) is multinomial logistic
  regression. Parameters: a list [W1, b1, W2, b2, ...], W of shape (in, out)."""

  sizes: tuple

  def init(self, rng):
    """Glorot-uniform weights (limit √(6/(in+out))), zero biases."""
    params = []
    for fan_in, fan_out in zip(self.sizes, self.sizes[1:]):
      limit = math.sqrt(6.0 / (fan_in + fan_out))
      params.append(rng.uniform(-limit, limit, (fan_in, fan_out)).astype(F32))
      params.append(np.zeros(fan_out, F32))
    return params

  def logits(self, params, x):
    h = x
    layers = len(params) // 2
    for i in range(layers):
      h = h @ params[2 * i] + params[2 * i + 1]
      if i < layers - 1:
        h = np.maximum(h, 0)
    return h

  def loss_and_gradients(self, params, x, y):
    """Mean softmax cross-entropy over the batch and its gradients."""
    layers = len(params) // 2
    activations = [x]
    h = x
    for i in range(layers):
      h = h @ params[2 * i] + params[2 * i + 1]
      if i < layers - 1:
        h = np.maximum(h, 0)
        activations.append(h)
    shifted = h - h.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -log_probs[np.arange(n), y].mean()
    delta = np.exp(log_probs)
    delta[np.arange(n), y] -= 1
    delta /= F32(n)
    grads = [None] * len(params)
    for i in reversed(range(layers)):
      grads[2 * i] = activations[i].T @ delta
      grads[2 * i + 1] = delta.sum(axis=0)
      if i > 0:
        delta = (delta @ params[2 * i].T) * (activations[i] > 0)
    return float(loss), grads

  def evaluate(self, params, x, y, chunk=10000):
    """(mean loss, accuracy) over all of (x, y)."""
    total_loss, correct = 0.0, 0
    for start in range(0, len(y), chunk):
      z = self.logits(params, x[start : start + chunk]).astype(np.float64)
      yy = y[start : start + chunk]
      z -= z.max(axis=1, keepdims=True)
      log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
      total_loss -= log_probs[np.arange(len(yy)), yy].sum()
      correct += int((z.argmax(axis=1) == yy).sum())
    return total_loss / len(y), correct / len(y)


TWO_NN = Network((784, 200, 200, 10))


def mlr(num_features, num_classes):
  return Network((num_features, num_classes))


# --------------------------------------------------------------- algorithm
@dataclasses.dataclass(frozen=True)
class ClientWork:
  """One client's work in a round: its index, and its minibatches in order
  (arrays of indices into its local data, all epochs)."""

  client: int
  batches: Sequence[np.ndarray]


# schedule(round) → the ClientWork of the clients whose work reaches the
# server that round.
Schedule = Callable[[int], Sequence[ClientWork]]


def client_update(model, params, x, y, batches, lr, mu):
  """McMahan et al. Algorithm 1's ClientUpdate, with FedProx's proximal
  term: w ← w − η(∇ℓ(w; b) + μ(w − w_t)) for each minibatch b."""
  anchor = params
  w = [p.copy() for p in params]
  lr = F32(lr)
  for batch in batches:
    _, grads = model.loss_and_gradients(w, x[batch], y[batch])
    if mu:
      grads = [g + F32(mu) * (v - a) for g, v, a in zip(grads, w, anchor)]
    w = [v - lr * g for v, g in zip(w, grads)]
  return w


def server_average(models, weights):
  """Σ_k n_k w_k / Σ_k n_k."""
  total = float(sum(weights))
  return [
    sum(F32(n / total) * m[i] for m, n in zip(models, weights)).astype(F32)
    for i in range(len(models[0]))
  ]


def own_schedule(
  num_clients,
  sizes,
  clients_per_round,
  epochs,
  batch_size,
  seed,
  straggler_fraction=0.0,
  keep_stragglers=False,
):
  """This implementation's own draws (one numpy stream per seed, not the
  repository's sampler): K clients uniformly without replacement each
  round; ⌊fraction·K + ½⌋ of them straggle with x ~ U{1..E−1} epochs
  (dropped unless `keep_stragglers`); each epoch a fresh permutation cut
  into batches of `batch_size` (-1: one batch of all)."""
  rng = np.random.default_rng([seed, 0xF00D])

  def schedule(round_num):
    del round_num  # Drawn in round order from the stream.
    chosen = np.sort(rng.choice(num_clients, clients_per_round, replace=False))
    num_stragglers = int(
      math.floor(straggler_fraction * clients_per_round + 0.5)
    )
    stragglers = set(rng.choice(chosen, num_stragglers, replace=False).tolist())
    work = []
    for client in chosen.tolist():
      e = epochs
      if client in stragglers:
        e = int(rng.integers(1, max(epochs, 2)))
        if not keep_stragglers:
          continue
      n = sizes[client]
      b = n if batch_size == -1 else batch_size
      batches = []
      for _ in range(e):
        order = rng.permutation(n)
        batches += [order[i : i + b] for i in range(0, n, b)]
      work.append(ClientWork(client, batches))
    return work

  return schedule


def rounds_to_target(rounds, accuracies, target):
  """FedAvg §3: where the best-so-far accuracy curve first reaches
  `target`, linearly interpolated between evaluated rounds (None: never)."""
  best, previous = -math.inf, None
  for r, a in zip(rounds, accuracies):
    if a >= target:
      if previous is None:
        return float(r)
      return previous + (r - previous) * (target - best) / (a - best)
    best, previous = max(best, a), r
  return None


def train(
  model,
  clients,
  test,
  lr,
  rounds,
  schedule,
  params,
  mu=0.0,
  eval_every=5,
  target=None,
  log=None,
):
  """Runs `rounds` rounds from `params`; evaluates the global model every
  `eval_every` rounds (and at round 0 and the last) on all clients'
  training data (f(w) = Σ_k p_k F_k(w), p_k = n_k / n) and the pooled test
  data. With `target`, stops at the first evaluation reaching it.

  clients: [(x_k, y_k)]; test: (x, y). Returns a dict of curves."""
  train_x = np.concatenate([x for x, _ in clients])
  train_y = np.concatenate([y for _, y in clients])
  history = dict(round=[], train_loss=[], test_accuracy=[])
  for r in range(rounds + 1):
    if r > 0:
      work = schedule(r)
      if work:
        models = [
          client_update(model, params, *clients[w.client], w.batches, lr, mu)
          for w in work
        ]
        params = server_average(
          models, [len(clients[w.client][1]) for w in work]
        )
    if r % eval_every == 0 or r == rounds:
      loss, _ = model.evaluate(params, train_x, train_y)
      _, accuracy = model.evaluate(params, *test)
      for k, v in (
        ('round', r),
        ('train_loss', loss),
        ('test_accuracy', accuracy),
      ):
        history[k].append(v)
      if log:
        log(f'round {r}: loss {loss:.4f} test accuracy {accuracy:.4f}')
      if not math.isfinite(loss):
        break
      if target is not None and accuracy >= target:
        break
  history['params'] = params
  return history


def last_half_mean(rounds, values, total_rounds):
  """Mean over the evaluated rounds T/2 < t <= T (FedISGD Tables 3-4)."""
  kept = [v for r, v in zip(rounds, values) if r > total_rounds / 2]
  return float(np.mean(kept)) if kept else None


# -------------------------------------------------------------------- data
def read_idx(path):
  """A gzip IDX file as a uint8 array (big-endian header: magic, dims)."""
  with gzip.open(path, 'rb') as f:
    raw = f.read()
  ndim = raw[3]
  dims = np.frombuffer(raw, '>u4', count=ndim, offset=4).astype(int)
  return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_mnist(data_dir):
  """(train_x, train_y, test_x, test_y): float32 [n, 784] in [0, 1], int."""
  folder = os.path.join(data_dir, 'mnist')
  names = (
    'train-images-idx3-ubyte.gz',
    'train-labels-idx1-ubyte.gz',
    't10k-images-idx3-ubyte.gz',
    't10k-labels-idx1-ubyte.gz',
  )
  tx, ty, vx, vy = (read_idx(os.path.join(folder, n)) for n in names)
  shape = lambda x: (x.reshape(len(x), -1) / F32(255)).astype(F32)
  return shape(tx), ty.astype(np.int64), shape(vx), vy.astype(np.int64)


def fedavg_mnist_clients(
  train_x, train_y, split, seed, num_clients=100, shards_per_client=2
):
  """FedAvg §3's partitions: 'iid' (shuffled, num_clients equal parts) or
  'noniid' (sorted by label, num_clients·shards_per_client shards, each
  client a random shards_per_client of them)."""
  rng = np.random.default_rng([seed, 0x5EED])
  if split == 'iid':
    parts = np.array_split(rng.permutation(len(train_y)), num_clients)
  else:
    shards = np.array_split(
      np.argsort(train_y, kind='stable'), num_clients * shards_per_client
    )
    picks = rng.permutation(len(shards)).reshape(num_clients, -1)
    parts = [np.concatenate([shards[s] for s in p]) for p in picks]
  return [(train_x[p], train_y[p]) for p in parts]


def read_npz_clients(path):
  """Clients from an .npz holding train_x_K, train_y_K, test_x_K, test_y_K
  for K = 0, 1, ... (e.g. a FedProx Synthetic dataset): (clients, test)."""
  data = np.load(path)
  count = len([k for k in data.files if k.startswith('train_x_')])
  clients = [
    (data[f'train_x_{k}'].astype(F32), data[f'train_y_{k}'].astype(np.int64))
    for k in range(count)
  ]
  test = (
    np.concatenate([data[f'test_x_{k}'] for k in range(count)]).astype(F32),
    np.concatenate([data[f'test_y_{k}'] for k in range(count)]).astype(
      np.int64
    ),
  )
  return clients, test


# --------------------------------------------------------------------- CLI
def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    'data',
    choices=('mnist', 'arrays', 'synthetic'),
    help="mnist: the IDX files, FedAvg's splits, the "
    '2NN; arrays (or synthetic): an .npz of clients '
    '(--npz), multinomial logistic regression',
  )
  parser.add_argument('--split', default='iid', choices=('iid', 'noniid'))
  parser.add_argument(
    '--data_dir',
    default=os.path.join(
      os.path.dirname(os.path.abspath(__file__)),
      '..',
      '..',
      '..',
      'shared',
      'data',
    ),
  )
  parser.add_argument('--npz', help="arrays: the clients' arrays")
  parser.add_argument('--num_classes', type=int, default=10)
  parser.add_argument('--lr', type=float, required=True)
  parser.add_argument('--mu', type=float, default=0.0)
  parser.add_argument('--clients_per_round', type=int, default=10)
  parser.add_argument('--epochs', type=int, default=1)
  parser.add_argument('--batch_size', type=int, default=10, help='-1: B = ∞')
  parser.add_argument('--straggler_fraction', type=float, default=0.0)
  parser.add_argument(
    '--keep_stragglers',
    action='store_true',
    help="FedProx: aggregate stragglers' partial work",
  )
  parser.add_argument('--rounds', type=int, default=400)
  parser.add_argument('--eval_every', type=int, default=5)
  parser.add_argument('--target', type=float, default=None)
  parser.add_argument('--seeds', default='0')
  parser.add_argument(
    '--cell',
    default=None,
    help='the scoreboard row this run cross-checks (its '
    '"paper | item"), kept with the results',
  )
  parser.add_argument(
    '--json',
    help='also merge the results into this JSON '
    'list (replacing earlier results of the same cell, '
    'seed and settings)',
  )
  parser.add_argument('--verbose', action='store_true')
  args = parser.parse_args(argv)

  results = []
  for seed in (int(s) for s in args.seeds.split(',')):
    start = time.process_time()
    if args.data == 'mnist':
      tx, ty, vx, vy = read_mnist(args.data_dir)
      clients = fedavg_mnist_clients(tx, ty, args.split, seed)
      test, model = (vx, vy), TWO_NN
    else:
      clients, test = read_npz_clients(args.npz)
      model = mlr(clients[0][0].shape[1], args.num_classes)
    params = model.init(np.random.default_rng([seed, 0x1417]))
    schedule = own_schedule(
      len(clients),
      [len(y) for _, y in clients],
      args.clients_per_round,
      args.epochs,
      args.batch_size,
      seed,
      args.straggler_fraction,
      args.keep_stragglers,
    )
    history = train(
      model,
      clients,
      test,
      args.lr,
      args.rounds,
      schedule,
      params,
      args.mu,
      args.eval_every,
      args.target,
      log=(lambda m: print(m, file=sys.stderr)) if args.verbose else None,
    )
    losses = history['train_loss']
    result = dict(
      cell=args.cell,
      data=args.data,
      split=args.split if args.data == 'mnist' else None,
      npz=os.path.basename(args.npz) if args.npz else None,
      seed=seed,
      lr=args.lr,
      mu=args.mu,
      clients_per_round=args.clients_per_round,
      epochs=args.epochs,
      batch_size=args.batch_size,
      straggler_fraction=args.straggler_fraction,
      keep_stragglers=args.keep_stragglers,
      eval_every=args.eval_every,
      rounds=history['round'][-1],
      target=args.target,
      rounds_to_target=(
        None
        if args.target is None
        else rounds_to_target(
          history['round'], history['test_accuracy'], args.target
        )
      ),
      final_train_loss=losses[-1],
      mean_train_loss=(float(np.mean(losses[1:])) if len(losses) > 1 else None),
      final_test_accuracy=history['test_accuracy'][-1],
      last_half_test_accuracy=last_half_mean(
        history['round'], history['test_accuracy'], history['round'][-1]
      ),
      cpu_seconds=round(time.process_time() - start, 1),
    )
    print(json.dumps(result), flush=True)
    results.append(result)
  if args.json:
    merged = []
    if os.path.exists(args.json):
      with open(args.json) as f:
        merged = json.load(f)
    key = lambda r: tuple(
      r.get(k)
      for k in (
        'cell',
        'data',
        'split',
        'npz',
        'seed',
        'lr',
        'mu',
        'clients_per_round',
        'epochs',
        'batch_size',
        'straggler_fraction',
        'keep_stragglers',
      )
    )
    replaced = {key(r) for r in results}
    merged = [r for r in merged if key(r) not in replaced] + results
    with open(args.json, 'w') as f:
      json.dump(merged, f, indent=1)
      f.write('\n')


if __name__ == '__main__':
  main()
