"""FedProx's Synthetic(α, β) and Synthetic-IID tasks (Li et al. 2020, §5.1).

Generator as in the FedProx paper's §5.1 and its authors' code: 30 devices,
x ∈ R^60, 10 classes, y = argmax(softmax(W_k x + b_k)) with
  u_k ~ N(0, α),  W_k ~ N(u_k, 1),  b_k ~ N(u_k, 1)     (model heterogeneity)
  B_k ~ N(0, β),  v_k ~ N(B_k, 1) elementwise,  x ~ N(v_k, Σ),
  Σ diagonal with Σ_jj = j^-1.2                          (data heterogeneity)
and n_k = ⌊lognormal(4, 2)⌋ + 50 samples per device (N(·, s) takes a standard
deviation s, as `np.random.normal` does in the authors' code). The IID
variant shares one W, b ~ N(0, 1) and draws every x from N(0, Σ). Each
device's samples are shuffled and split 90% train / 10% test (the authors'
generator; their paper's Appendix C.2 says 80/20, FedISGD §3.2 uses 80/20:
`train_fraction`). All draws come from `seed`, so a task name and seed
always give the same dataset.

`synthetic_A_B_Nclass` (FedISGD §3.4: "Synthetic_1_1 客户端本地类别设置为
5", each device's local classes set to 5) is Synthetic(α, β) with the same
x and W_k, b_k, where each device k's label is the argmax of W_k x + b_k
over N classes drawn for that device (uniformly, without replacement, from
a stream of `seed` of their own), so a device holds at most N classes.

With `data_dir`, the same task is read from LEAF JSON instead (e.g. the files
the FedProx authors' generator wrote), for byte-identical comparisons.
"""

import numpy as np

import tasks
from tasks import base
from tasks import leaf
from tasks import models

NUM_DEVICES = 30
NUM_FEATURES = 60
NUM_CLASSES = 10
TRAIN_FRACTION = 0.9


def parse_name(name):
  """'synthetic_1_1' → (1.0, 1.0, False, None); 'synthetic_iid' → (0, 0,
  True, None); 'synthetic_1_1_5class' → (1.0, 1.0, False, 5)."""
  match = tasks.SYNTHETIC_NAME.match(name)
  if not match:
    return None
  if name == 'synthetic_iid':
    return 0.0, 0.0, True, None
  classes = int(match.group(3)) if match.group(3) else None
  return float(match.group(1)), float(match.group(2)), False, classes


def generate(
  alpha: float,
  beta: float,
  iid: bool,
  seed: int,
  num_devices: int = NUM_DEVICES,
  classes_per_device: int | None = None,
):
  """Per-device (x float32[n_k, 60], y int32[n_k]) lists, before splitting.

  `classes_per_device`: each device's labels are the argmax over its own
  random subset of that many classes (see the module docstring).
  """
  if classes_per_device is not None and not (
    1 <= classes_per_device <= NUM_CLASSES
  ):
    raise tasks.DataError(
      f'classes per device must be in 1..{NUM_CLASSES}, '
      f'got {classes_per_device}'
    )
  class_rng = np.random.default_rng([seed, 5])
  rng = np.random.default_rng(seed)
  samples = rng.lognormal(4, 2, num_devices).astype(int) + 50
  covariance = np.diag(np.arange(1, NUM_FEATURES + 1) ** -1.2)
  if iid:
    feature_means = np.zeros((num_devices, NUM_FEATURES))
    shared_w = rng.normal(0, 1, (NUM_FEATURES, NUM_CLASSES))
    shared_b = rng.normal(0, 1, NUM_CLASSES)
  else:
    model_means = rng.normal(0, alpha, num_devices)  # u_k
    feature_centres = rng.normal(0, beta, num_devices)  # B_k
    feature_means = np.stack(
      [rng.normal(c, 1, NUM_FEATURES) for c in feature_centres]
    )  # v_k
  xs, ys = [], []
  for k in range(num_devices):
    if iid:
      w, b = shared_w, shared_b
    else:
      w = rng.normal(model_means[k], 1, (NUM_FEATURES, NUM_CLASSES))
      b = rng.normal(model_means[k], 1, NUM_CLASSES)
    x = rng.multivariate_normal(feature_means[k], covariance, samples[k])
    logits = x @ w + b  # argmax softmax = argmax logits
    if classes_per_device is not None:
      kept = class_rng.choice(NUM_CLASSES, classes_per_device, replace=False)
      logits = np.where(np.isin(np.arange(NUM_CLASSES), kept), logits, -np.inf)
    xs.append(x.astype(np.float32))
    ys.append(np.argmax(logits, axis=1).astype(np.int32))
  return xs, ys


def split_devices(xs, ys, seed, train_fraction=TRAIN_FRACTION):
  """Shuffles each device's samples; first ⌊fraction·n_k⌋ are training."""
  offsets = np.cumsum([0] + [len(y) for y in ys])
  return base.split_devices(
    np.concatenate(xs),
    np.concatenate(ys),
    [np.arange(start, end) for start, end in zip(offsets, offsets[1:])],
    train_fraction,
    np.random.default_rng([seed, 1]),
    lambda k: f'f_{k:05d}',
  )


def load(
  name: str,
  seed: int = 0,
  data_dir: str | None = None,
  train_fraction: float | None = None,
):
  """The task `name` (synthetic_A_B or synthetic_iid) as a FederatedTask.

  `train_fraction` (default 0.9, FedProx's; FedISGD used 0.8) applies to
  generated data only: LEAF files come already split.
  """
  alpha, beta, iid, classes = parse_name(name)
  if data_dir:
    if train_fraction is not None:
      raise tasks.DataError('--train_fraction cannot re-split LEAF files')
    train, test = leaf.read_leaf_dataset(data_dir, (NUM_FEATURES,), NUM_CLASSES)
    source = f'LEAF JSON from {data_dir}'
  else:
    fraction = TRAIN_FRACTION if train_fraction is None else train_fraction
    train, test = split_devices(
      *generate(alpha, beta, iid, seed, classes_per_device=classes),
      seed,
      fraction,
    )
    source = f'generated with data seed {seed}, {fraction:g} train'
  return base.FederatedTask(
    name=name,
    train=base.client_data_from_arrays(train),
    test=base.client_data_from_arrays(test),
    model_fn=models.multinomial_logistic_regression(NUM_FEATURES, NUM_CLASSES),
    description=f'FedProx {name} ({source}), MLR',
  )
