"""Shakespeare next-character prediction (FedAvg §3; FedProx §5.1; LEAF).

Tasks (each `loader(data_dir, seed, **options) -> FederatedTask`):

* `shakespeare`: TFF's federated Shakespeare (715 roles, LEAF-derived), read
  from `<data_dir>/tff/shakespeare.sqlite` (TFF's `SqlClientData` file; never
  downloaded). Each client's train/test snippets become fixed 81-token
  windows exactly as TFF's `simulation.baselines.shakespeare` preprocessing
  does: bytes → TFF `CHAR_VOCAB` ids + 1 (pad 0, oov 87, bos 88, eos 89;
  90 symbols), [bos] + snippet + [eos] padded with 0 to a multiple of 81,
  cut into windows; x = window[:-1], y = window[1:] (int32[80] each).
* `shakespeare_roles`: a LEAF-style split of the complete works
  (`<data_dir>/shakespeare/pg100.txt.gz`): one client per speaking role
  (play + character) with at least 2 lines; each role's first 80% of lines
  (at least 1) is its training text and the rest its test text, each joined
  with '\\n' and tokenized as above. Non-IID by role.
* `shakespeare_roles_iid`: the same lines, shuffled (seeded) across the same
  number of clients, balanced (FedAvg's IID Shakespeare).

Options: `num_clients=N` keeps a seeded random subset of N clients (for
short runs on a CPU), `seed` chooses it (and the IID shuffle).

The model is `text_models.char_lstm(90)` (820,522 parameters);
`shakespeare_roles_lstm100` has FedProx's of 100 units (133,810).
"""

import collections
import functools
import gzip
import os
import re
import zlib

import numpy as np

import tasks
from tasks import base
from tasks import text_models
from tasks import tff_sqlite
from tasks import validate

SEQUENCE_LENGTH = 80
# TFF's vocabulary (tff.simulation.baselines.shakespeare, from TFF's text
# generation tutorial); ids are index + 1, 0 being padding.
CHAR_VOCAB = list(
  'dhlptx@DHLPTX'
  ' $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
)
PAD = 0
OOV = len(CHAR_VOCAB) + 1
BOS = len(CHAR_VOCAB) + 2
EOS = len(CHAR_VOCAB) + 3
VOCAB_SIZE = len(CHAR_VOCAB) + 4  # 90: pad, 86 characters, oov, bos, eos.
TRAIN_FRACTION = 0.8

_BYTE_TO_ID = np.full(256, OOV, np.int32)
for _i, _c in enumerate(CHAR_VOCAB):
  _BYTE_TO_ID[ord(_c)] = _i + 1

SQLITE_HELP = (
  "expected {path}: TFF's federated Shakespeare SQLite file (what "
  'tff.simulation.datasets.shakespeare.load_data caches, from '
  'https://storage.googleapis.com/tff-datasets-public/shakespeare.sqlite.lzma'
  ', unpacked), under <data_dir>/tff/. Nothing is downloaded.'
)
PG100_HELP = (
  'expected {path}: Project Gutenberg EBook #100, The Complete Works of '
  'William Shakespeare (https://www.gutenberg.org/ebooks/100, gzipped '
  'pg100.txt), under <data_dir>/shakespeare/. Nothing is downloaded.'
)


# -------------------------------------------------------------- tokenization
def tokenize(snippet) -> np.ndarray:
  """int32[n, 81] windows of one snippet (str or UTF-8 bytes), as TFF does."""
  if isinstance(snippet, str):
    snippet = snippet.encode('utf-8')
  ids = _BYTE_TO_ID[np.frombuffer(snippet, np.uint8)]
  tokens = np.concatenate([[BOS], ids, [EOS]]).astype(np.int32)
  pad = (-len(tokens)) % (SEQUENCE_LENGTH + 1)
  tokens = np.concatenate([tokens, np.zeros(pad, np.int32)])
  return tokens.reshape(-1, SEQUENCE_LENGTH + 1)


def to_examples(snippets):
  """OrderedDict(x=int32[n, 80], y=int32[n, 80]) from a list of snippets."""
  windows = (
    np.concatenate([tokenize(s) for s in snippets])
    if snippets
    else (np.zeros((0, SEQUENCE_LENGTH + 1), np.int32))
  )
  return collections.OrderedDict(
    x=windows[:, :-1].copy(), y=windows[:, 1:].copy()
  )


def detokenize(ids) -> str:
  """Readable text of token ids (pad dropped; oov/bos/eos as ¤ ^ $)."""
  special = {OOV: '¤', BOS: '^', EOS: '$'}
  return ''.join(
    special.get(
      int(i), CHAR_VOCAB[int(i) - 1] if 0 < i <= len(CHAR_VOCAB) else ''
    )
    for i in ids
    if i != PAD
  )


# ---------------------------------------------------------- TFF SQLite file
SNIPPETS = {'snippets': tff_sqlite.Feature('bytes')}


@functools.lru_cache(maxsize=4)
def _read_sqlite(fingerprint):
  """{split: {client: [snippet bytes]}} from TFF's SQLite, checked
  (`tasks.tff_sqlite`: tables, metadata counts, one snippet per example)."""
  path = fingerprint[0]
  splits = tff_sqlite.read(path, ('train', 'test'), SNIPPETS)
  splits = {
    split: collections.OrderedDict(
      (client, list(arrays['snippets'])) for client, arrays in clients.items()
    )
    for split, clients in splits.items()
  }
  for client in splits['train']:
    if client not in splits['test']:
      raise validate.fail(path, f'client {client!r} has no test examples')
  for client in splits['test']:
    if client not in splits['train']:
      raise validate.fail(path, f'client {client!r} has no train examples')
  return splits


def read_tff_shakespeare(data_dir):
  """(train, test) {client: [snippet bytes]} from <data_dir>/tff/.

  Checks the file first, so TFF never tries to download it, then opens it
  with `tff.simulation.datasets.shakespeare.load_data` (TFF's own reader) to
  confirm TFF sees the same clients; the snippets are then read in bulk
  with sqlite3 (the per-client TFF datasets take ~1.5 min for 715 clients;
  tests check both give the same snippets).
  """
  cache_dir = os.path.join(data_dir, 'tff')
  path = os.path.join(cache_dir, 'shakespeare.sqlite')
  if not os.path.isfile(path):
    raise tasks.DataError(SQLITE_HELP.format(path=path))
  splits = _read_sqlite(base.file_fingerprint(path))
  try:
    train, _ = tff_client_data(data_dir)
    tff_ids = list(train.client_ids)
  except Exception as e:
    raise validate.fail(
      path, f'TFF cannot read it ({type(e).__name__}: {e})'
    ) from None
  if sorted(tff_ids) != list(splits['train']):
    raise validate.fail(path, 'TFF lists different clients')
  return splits['train'], splits['test']


def tff_client_data(data_dir):
  """TFF's (train, test) ClientData of snippets; the file must exist."""
  import tensorflow_federated as tff

  cache_dir = os.path.join(data_dir, 'tff')
  path = os.path.join(cache_dir, 'shakespeare.sqlite')
  if not os.path.isfile(path):
    raise tasks.DataError(SQLITE_HELP.format(path=path))
  return tff.simulation.datasets.shakespeare.load_data(cache_dir=cache_dir)


# ------------------------------------------------------------- pg100 roles
_TITLE_MARK = 'by William Shakespeare'
_LICENSE = re.compile(r'<<THIS ELECTRONIC VERSION.*?>>', re.S)
# A speech starts with an indented capitalised name and '.': "  KING. Text".
# The Comedy of Errors is not indented ("DUKE. Text", continuation "  Text").
_NAME = r"([A-Z][A-Za-z'&-]*(?: [A-Za-z'&-]+)*)"
_SPEAKER = re.compile(r'^  ' + _NAME + r'\. (.*)$')
_CONTINUATION = re.compile(r'^    (\S.*)$')
_COE_SPEAKER = re.compile(r'^' + _NAME + r'\. (.*)$')
_COE_CONTINUATION = re.compile(r'^  (\S.*)$')
_NOT_ROLES = re.compile(r'^(ACT|SCENE|EPILOGUE|PROLOGUE|THE END)\b')


def parse_plays(text, where='pg100'):
  """[(title, {role: [lines]})] from the complete works' text.

  Works start at the line before "by William Shakespeare" (the title);
  speech lines follow LEAF's rules (indented capitalised name + '.', then
  more-indented continuation lines); a blank or unmatched line ends a speech.
  Names are upper-cased (LEAF's fix for SIR Toby / SIR TOBY). Works with no
  speakers (the sonnets, the poems) give no roles.
  """
  text = _LICENSE.sub('', text.replace('\r\n', '\n').replace('\r', '\n'))
  end = text.find('End of the Project Gutenberg EBook')
  if end >= 0:
    text = text[:end]
  lines = text.split('\n')
  plays, current, speaker, coe = [], None, None, False
  for i, line in enumerate(lines):
    if line.strip() == _TITLE_MARK:
      title = next(
        (
          lines[j].strip()
          for j in range(i - 1, max(i - 8, -1), -1)
          if lines[j].strip()
        ),
        '',
      )
      if not title:
        raise validate.fail(where, f'no title above line {i + 1}')
      current = collections.OrderedDict()
      plays.append((title, current))
      coe = title == 'THE COMEDY OF ERRORS'
      speaker = None
      continue
    if current is None:
      continue
    match = (_COE_SPEAKER if coe else _SPEAKER).match(line)
    if match and not _NOT_ROLES.match(match.group(1)):
      speaker = match.group(1).upper()
      current.setdefault(speaker, []).append(match.group(2).strip())
      continue
    match = (_COE_CONTINUATION if coe else _CONTINUATION).match(line)
    if speaker and match:
      current[speaker].append(match.group(1).strip())
      continue
    speaker = None
  return [(title, roles) for title, roles in plays if roles]


def _client_name(title, role):
  return re.sub(r'[^A-Za-z0-9]+', '_', f'{title}_{role}').strip('_')


@functools.lru_cache(maxsize=4)
def _read_roles(fingerprint):
  """{client: [lines]} of roles with >= 2 lines, from pg100.txt.gz."""
  path = fingerprint[0]
  try:
    with gzip.open(path, 'rb') as f:
      text = f.read().decode('utf-8-sig')
  except (OSError, EOFError, zlib.error) as e:
    raise validate.fail(
      path, f'not a readable gzip file ({e}); is it truncated or corrupt?'
    ) from None
  except UnicodeDecodeError as e:
    raise validate.fail(
      path, f'not UTF-8 text (byte {e.start} of the text)'
    ) from None
  if 'End of the Project Gutenberg EBook' not in text and (
    'End of The Project Gutenberg' not in text
  ):
    raise validate.fail(
      path,
      'no "End of the Project Gutenberg EBook" line; the text is truncated',
    )
  roles = collections.OrderedDict()
  for title, by_role in parse_plays(text, path):
    for role, lines in by_role.items():
      if len(lines) >= 2:
        roles[_client_name(title, role)] = lines
  if not roles:
    raise validate.fail(path, 'no speaking roles found')
  return roles


def read_roles(data_dir):
  path = os.path.join(data_dir, 'shakespeare', 'pg100.txt.gz')
  if not os.path.isfile(path):
    raise tasks.DataError(PG100_HELP.format(path=path))
  return _read_roles(base.file_fingerprint(path))


def split_roles(roles, iid=False, seed=0, train_fraction=TRAIN_FRACTION):
  """(train, test) {client: [text]}: per role, first 80% of lines train.

  With `iid`, all train lines (and all test lines) are shuffled and dealt
  evenly to as many clients as there are roles.
  """
  train, test = collections.OrderedDict(), collections.OrderedDict()
  for client, lines in roles.items():
    cut = min(max(1, int(train_fraction * len(lines))), len(lines) - 1)
    train[client], test[client] = lines[:cut], lines[cut:]
  if iid:
    rng = np.random.default_rng([seed, 2])
    names = [f'iid_{k:04d}' for k in range(len(roles))]
    dealt = []
    for split in (train, test):
      pool = [line for lines in split.values() for line in lines]
      order = rng.permutation(len(pool))
      dealt.append(
        collections.OrderedDict(
          (name, [pool[j] for j in part])
          for name, part in zip(names, np.array_split(order, len(names)))
        )
      )
    train, test = dealt
  join = lambda split: collections.OrderedDict(
    (c, ['\n'.join(lines)]) for c, lines in split.items()
  )
  return join(train), join(test)


# ------------------------------------------------------------------- tasks
def build_task(name, train_snippets, test_snippets, description, units=256):
  """A FederatedTask from {client: [snippets]} train/test dicts, with the
  char-LSTM of `units` units a layer."""
  train = collections.OrderedDict(
    (c, to_examples(s)) for c, s in train_snippets.items()
  )
  test = collections.OrderedDict(
    (c, to_examples(s)) for c, s in test_snippets.items()
  )
  return base.FederatedTask(
    name=name,
    train=base.client_data_from_arrays(train),
    test=base.client_data_from_arrays(test),
    model_fn=text_models.char_lstm(VOCAB_SIZE, SEQUENCE_LENGTH, PAD, units),
    description=description,
  )


def load_shakespeare(data_dir, seed=0, num_clients=None):
  train, test = read_tff_shakespeare(data_dir)
  train, test = base.client_subset(train, test, num_clients, seed)
  subset = f', {len(train)}-client subset (seed {seed})' if num_clients else ''
  return build_task(
    'shakespeare',
    train,
    test,
    'TFF federated Shakespeare (715 roles; snippets → 80-char sequences, '
    f'TFF vocabulary){subset}; char-LSTM, next-character prediction',
  )


def load_roles(data_dir, seed=0, num_clients=None, iid=False, units=256):
  train, test = split_roles(read_roles(data_dir), iid=iid, seed=seed)
  train, test = base.client_subset(train, test, num_clients, seed)
  subset = f', {len(train)}-client subset (seed {seed})' if num_clients else ''
  kind = 'IID: lines shuffled across' if iid else 'one client per'
  name = 'shakespeare_roles' + ('_iid' if iid else '')
  return build_task(
    name if units == 256 else f'{name}_lstm{units}',
    train,
    test,
    f'LEAF-style Shakespeare from pg100 ({kind} speaking role with >= 2 '
    f'lines, 80/20 lines per role){subset}; char-LSTM'
    + ('' if units == 256 else f" of {units} units (FedProx's)"),
    units,
  )


TASKS = {
  'shakespeare': load_shakespeare,
  'shakespeare_roles': load_roles,
  'shakespeare_roles_iid': functools.partial(load_roles, iid=True),
  # FedProx's model (App. C.1) on the same split.
  'shakespeare_roles_lstm100': functools.partial(load_roles, units=100),
}
