"""Sent140: tweet sentiment, one client per Twitter user (FedProx §5.1, LEAF).

`sent140` reads, from `<data_dir>/sent140/`, the first source that exists
(or the one named by the option `source=`):

1. `leaf`: full LEAF output, `sent140/train/*.json` + `sent140/test/*.json`
   (x = [id, date, query, user, text, source], y = 0/1); used as split.
2. `csv`: the raw Sentiment140 training CSV,
   `sent140/training.1600000.processed.noemoticon.csv` (six columns
   polarity,id,date,query,user,text, no header, ISO-8859-1). Polarity 0 → 0,
   4 → 1; neutral (2) tweets are dropped. Tweets are grouped by user, users
   with fewer than `min_tweets` (default 3, LEAF's keep_3) are dropped and
   each user's tweets are split as LEAF does: a random (seeded)
   max(1, int(0.9 n)) train, the rest test.
3. `leaf_sample`: the shared data's `sent140/leaf_test_sample.json`, ONE
   LEAF test split (7,086 users, 8,692 tweets; its train split is not
   available offline). It is re-split per user like the CSV, with
   `min_tweets` default 2 (906 users have >= 2 tweets): a partial stand-in,
   not LEAF/FedProx Sent140.

Any CSV path can also be given with `csv_path=` (six columns, or the shared
`training_sample_3000.csv`'s seven with a leading pandas index, whose first
line is skipped; a header line whose polarity is not a number is skipped).

Text → 25 ids: lower-case, LEAF's `split_line` regex ([\\w']+ or one of
.,!?;), pad id 0, unknown id 1, words from 2. The vocabulary is the training
words seen at least twice (at most 10,000, by frequency), or with
`embeddings=PATH` (a GloVe text file: "word v1 ... vd" lines) the words of
the GloVe file that occur in the data's tweets (train or test: frozen
pretrained vectors, equivalent to using the whole GloVe vocabulary), whose
vectors become the frozen embedding (pad and unknown rows are 0).

Model: `text_models.sent140_lstm` (2 × LSTM(256), 2 logits).
"""

import collections
import csv
import functools
import glob
import io
import os
import re

import numpy as np

import tasks
from tasks import base
from tasks import leaf
from tasks import text_models
from tasks import validate

SEQUENCE_LENGTH = 25
PAD, UNK = 0, 1
EMBEDDING_DIM = 100  # trainable embedding without GloVe
MAX_VOCAB = 10_000
MIN_COUNT = 2
TRAIN_FRACTION = 0.9
RAW_CSV = 'training.1600000.processed.noemoticon.csv'
LEAF_SAMPLE = 'leaf_test_sample.json'
SOURCES = ('leaf', 'csv', 'leaf_sample')
_WORDS = re.compile(r"[\w']+|[.,!?;]")

HELP = (
  'Sent140 needs one of, under {root}: (1) LEAF output train/*.json and '
  'test/*.json (LEAF data/sent140, ./preprocess.sh; '
  'https://github.com/TalwalkarLab/leaf); (2) {raw} (Sentiment140 '
  'training set, http://help.sentiment140.com/for-students, '
  'trainingandtestdata.zip); (3) {sample} (a LEAF Sent140 test split, as '
  'in the shared data). Nothing is downloaded.'
)


def split_line(text):
  """LEAF's tokenizer, lower-cased: words (with ') and . , ! ? ;."""
  return _WORDS.findall(text.lower())


# ------------------------------------------------------------------ readers
def read_csv(path):
  """{user: [(text, label)]} from a Sentiment140 CSV; neutral dropped.

  Checked, one DataError naming the file and line otherwise: CSV syntax
  (strict: a quote left open is an error), 6 fields a line (7 with a
  pandas index column), polarity 0, 2 or 4, a non-empty user, and the end
  of the file (a line break, or the quote closing the last field: anything
  else is a line cut off). Read as UTF-8, else as ISO-8859-1 (the official
  file's encoding).
  """
  try:
    with open(path, 'rb') as f:
      raw = f.read()
  except OSError as e:
    raise validate.fail(path, f'cannot read it ({e.strerror})') from None
  try:
    text = raw.decode('utf-8')
  except UnicodeDecodeError:
    text = raw.decode('latin-1')  # The official file is ISO-8859-1.
  if not text.strip():
    raise validate.fail(path, 'empty file: no tweets')
  if not text.endswith(('\n', '\r', '"')):
    raise validate.fail(
      path,
      'the last line is cut off (no line break at '
      'the end of the file): truncated?',
    )
  reader = csv.reader(io.StringIO(text, newline=''), strict=True)
  by_user = collections.OrderedDict()
  try:
    for index, row in enumerate(reader):
      if not row:
        continue
      where = f'{path}:{reader.line_num}'
      if len(row) == 7:  # A pandas to_csv copy: a leading index column.
        if index == 0 and row[0] == '':
          continue  # pandas' header line (really a tweet): skip, as README.
        row = row[1:]
      if len(row) != 6:
        raise validate.fail(
          where,
          f'{len(row)} fields, expected 6 '
          '(polarity,id,date,query,user,text); truncated '
          'or corrupt file?',
        )
      polarity = row[0].strip()
      if index == 0 and not polarity.lstrip('-').isdigit():
        continue  # A header line.
      if polarity not in ('0', '2', '4'):
        raise validate.fail(where, f'polarity {polarity!r} is not 0, 2 or 4')
      if not row[4]:
        raise validate.fail(where, 'the user field is empty')
      if polarity == '2':
        continue
      by_user.setdefault(row[4], []).append((row[5], int(polarity == '4')))
  except csv.Error as e:
    raise validate.fail(
      f'{path}:{reader.line_num}',
      f'not valid CSV ({e}); truncated or corrupt file?',
    ) from None
  if not by_user:
    raise validate.fail(path, 'no tweets')
  return by_user


# LEAF Sent140 samples: x = [id, date, query, user, text, source] strings,
# y = 0/1 (checked by leaf.file_schema with these).
TWEET = validate.ListOf(
  validate.Str(),
  min_len=5,
  what='a list of strings [id, date, query, user, text, ...]',
)
LEAF_X = validate.ListOf(
  TWEET, min_len=1, name='sample', what='a list of tweets'
)
LEAF_Y = validate.Labels(2, as_list=True)


def _leaf_tweets(split):
  """{user: [(text, label)]} from checked LEAF data {user: (x, y)}."""
  return collections.OrderedDict(
    (user, [(x[4], y) for x, y in zip(xs, ys)])
    for user, (xs, ys) in split.items()
  )


def split_users(by_user, min_tweets, seed=0, train_fraction=TRAIN_FRACTION):
  """LEAF's per-user split: a random max(1, int(0.9 n)) train, rest test.

  Random (seeded), not by position: Sentiment140 lists all negative tweets
  before all positive ones, so a positional split would skew test labels.
  """
  rng = np.random.default_rng([seed, 4])
  train, test = collections.OrderedDict(), collections.OrderedDict()
  for user, tweets in by_user.items():
    if len(tweets) < max(min_tweets, 2):
      continue
    cut = min(max(1, int(train_fraction * len(tweets))), len(tweets) - 1)
    order = rng.permutation(len(tweets))
    train[user] = [tweets[i] for i in sorted(order[:cut])]
    test[user] = [tweets[i] for i in sorted(order[cut:])]
  return train, test


@functools.lru_cache(maxsize=4)
def _read_source(
  source, fingerprint, min_tweets, seed=0, train_fraction=TRAIN_FRACTION
):
  path = fingerprint[0]
  if source == 'leaf':
    train, test = leaf.read_leaf_pair(path, LEAF_X, LEAF_Y)
    return _leaf_tweets(train), _leaf_tweets(test)
  if source == 'leaf_sample':
    by_user = _leaf_tweets(leaf.read_leaf_file(path, LEAF_X, LEAF_Y))
  else:
    by_user = read_csv(path)
  train, test = split_users(by_user, min_tweets, seed, train_fraction)
  if not train:
    raise tasks.DataError(f'{path}: no user has {min_tweets} tweets')
  return train, test


def find_source(data_dir, source='auto', csv_path=None):
  """(source, path) of the data to read; DataError naming what is expected."""
  root = os.path.join(data_dir, 'sent140')
  if csv_path:
    if not os.path.isfile(csv_path):
      raise tasks.DataError(f'no Sentiment140 CSV at {csv_path}')
    return 'csv', csv_path
  candidates = dict(
    leaf=(
      root,
      glob.glob(os.path.join(root, 'train', '*.json'))
      and glob.glob(os.path.join(root, 'test', '*.json')),
    ),
    csv=(
      os.path.join(root, RAW_CSV),
      os.path.isfile(os.path.join(root, RAW_CSV)),
    ),
    leaf_sample=(
      os.path.join(root, LEAF_SAMPLE),
      os.path.isfile(os.path.join(root, LEAF_SAMPLE)),
    ),
  )
  if source != 'auto':
    if source not in SOURCES:
      raise ValueError(f'source must be auto or one of {SOURCES}')
    if not candidates[source][1]:
      raise tasks.DataError(
        f'sent140 source {source!r}: nothing at '
        f'{candidates[source][0]}. '
        + HELP.format(root=root, raw=RAW_CSV, sample=LEAF_SAMPLE)
      )
    return source, candidates[source][0]
  for name in SOURCES:
    if candidates[name][1]:
      return name, candidates[name][0]
  raise tasks.DataError(HELP.format(root=root, raw=RAW_CSV, sample=LEAF_SAMPLE))


# --------------------------------------------------------------- vocabulary
def _glove_vector(values, where):
  """float32 vector of a GloVe line's `values`; DataError naming `where`
  unless every one is a finite float32 number."""
  try:
    vector = np.array(values, np.float64)
  except ValueError:
    raise validate.fail(where, 'non-numeric vector') from None
  bad = ~np.isfinite(vector) | (np.abs(vector) > validate.FLOAT32_MAX)
  if bad.any():
    value = values[int(np.argmax(bad))]
    raise validate.fail(
      where,
      f'vector value {value[:24]!r}'
      f'{"..." if len(value) > 24 else ""} is not a '
      'finite float32 number',
    )
  return vector.astype(np.float32)


def read_glove(path, words=None):
  """(word list, float32[n, d]) of the GloVe text file's `words` (all of
  them when None); a word listed twice keeps its first vector.

  Checked, one DataError naming the file and line otherwise: UTF-8 text,
  every line "word v1 ... vd" with the same d (a word2vec "N d" header
  line is refused), a line break at the end (else the last line is cut
  off); the vectors kept must be finite float32 numbers.
  """
  if not os.path.isfile(path):
    raise tasks.DataError(
      f'no GloVe embeddings file at {path} (a text file '
      'of "word v1 ... vd" lines, e.g. glove.6B.300d.txt '
      'from https://nlp.stanford.edu/projects/glove/)'
    )
  found, kept, vectors, dim, last, number = [], set(), [], None, b'\n', 0
  try:
    f = open(path, 'rb')
  except OSError as e:
    raise validate.fail(path, f'cannot read it ({e.strerror})') from None
  with f:
    for number, raw in enumerate(f, 1):
      last, where = raw, f'{path}:{number}'
      try:
        line = raw.decode('utf-8')
      except UnicodeDecodeError as e:
        raise validate.fail(
          where, f'not UTF-8 text (byte {e.start} of the line)'
        ) from None
      parts = line.rstrip('\r\n').rstrip(' ').split(' ')
      if len(parts) < 2:
        if not line.strip():
          continue
        raise validate.fail(where, 'not "word v1 ... vd"')
      if dim is None:
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
          raise validate.fail(
            where, 'a word2vec header line ("N d"), not GloVe text: remove it'
          )
        dim = len(parts) - 1
      if len(parts) - 1 != dim:
        raise validate.fail(
          where,
          f'{len(parts) - 1} values, expected {dim} '
          '(truncated or corrupt file?)',
        )
      if words is not None and parts[0] not in words or parts[0] in kept:
        continue
      vectors.append(_glove_vector(parts[1:], where))
      found.append(parts[0])
      kept.add(parts[0])
  if dim is None:
    raise validate.fail(path, 'empty GloVe file')
  if not last.endswith(b'\n'):
    raise validate.fail(
      f'{path}:{number}',
      'the last line has no line break: the file is cut off (truncated?)',
    )
  matrix = np.stack(vectors) if vectors else np.zeros((0, dim), np.float32)
  return found, matrix


def build_vocabulary(train, test, embeddings=None):
  """(word → id, embedding matrix or None)."""
  counts = collections.Counter(
    w
    for tweets in train.values()
    for text, _ in tweets
    for w in split_line(text)
  )
  if embeddings:
    seen = set(counts) | {
      w
      for tweets in test.values()
      for text, _ in tweets
      for w in split_line(text)
    }
    words, vectors = read_glove(embeddings, seen)
    if not words:
      raise validate.fail(
        embeddings,
        f'none of the {len(seen)} words of the '
        'tweets is in it (not GloVe vectors for this data?)',
      )
    order = sorted(range(len(words)), key=lambda i: (-counts[words[i]], i))
    words = [words[i] for i in order]
    matrix = np.concatenate(
      [np.zeros((2, vectors.shape[1]), np.float32), vectors[order]]
    )
  else:
    words = [
      w
      for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
      if c >= MIN_COUNT
    ][:MAX_VOCAB]
    matrix = None
  return {w: i + 2 for i, w in enumerate(words)}, matrix


def encode(text, vocabulary):
  ids = [vocabulary.get(w, UNK) for w in split_line(text)[:SEQUENCE_LENGTH]]
  return ids + [PAD] * (SEQUENCE_LENGTH - len(ids))


def to_examples(tweets, vocabulary):
  return collections.OrderedDict(
    x=np.asarray([encode(t, vocabulary) for t, _ in tweets], np.int32),
    y=np.asarray([y for _, y in tweets], np.int32),
  )


# --------------------------------------------------------------------- task
def load(
  data_dir,
  seed=0,
  embeddings=None,
  source='auto',
  csv_path=None,
  min_tweets=None,
  num_clients=None,
  train_fraction=None,
):
  """The Sent140 FederatedTask (see the module docstring).

  `train_fraction` (default 0.9, LEAF's) re-splits each user's tweets of a
  CSV or the LEAF sample; full LEAF output comes split.
  """
  source, path = find_source(data_dir, source, csv_path)
  if train_fraction is not None and source == 'leaf':
    raise tasks.DataError('--train_fraction cannot re-split LEAF output')
  if min_tweets is None:
    min_tweets = 2 if source == 'leaf_sample' else 3
  train, test = _read_source(
    source,
    base.file_fingerprint(path),
    min_tweets,
    seed,
    train_fraction or TRAIN_FRACTION,
  )
  train, test = base.client_subset(train, test, num_clients, seed)
  vocabulary, matrix = build_vocabulary(train, test, embeddings)
  vocab_size = len(vocabulary) + 2
  model_fn = text_models.sent140_lstm(
    vocab_size,
    SEQUENCE_LENGTH,
    EMBEDDING_DIM if matrix is None else matrix.shape[1],
    matrix,
  )
  what = dict(
    leaf='full LEAF Sent140 split',
    csv=f'Sentiment140 CSV {os.path.basename(path)}, users with >= '
    f'{min_tweets} tweets, LEAF 90/10 split per user',
    leaf_sample=f'PARTIAL: one LEAF test split ({LEAF_SAMPLE}) re-split '
    f'{train_fraction or TRAIN_FRACTION:g} train per user, '
    f'users with >= {min_tweets} tweets',
  )[source]
  subset = f', {len(train)}-user subset (seed {seed})' if num_clients else ''
  embedding = (
    f'frozen GloVe {matrix.shape[1]}-d ({len(vocabulary)} words)'
    if matrix is not None
    else f'trainable {EMBEDDING_DIM}-d embedding ({len(vocabulary)} words)'
  )
  task = base.FederatedTask(
    name='sent140',
    train=base.client_data_from_arrays(
      collections.OrderedDict(
        (u, to_examples(t, vocabulary)) for u, t in train.items()
      )
    ),
    test=base.client_data_from_arrays(
      collections.OrderedDict(
        (u, to_examples(t, vocabulary)) for u, t in test.items()
      )
    ),
    model_fn=model_fn,
    description=f'Sent140 ({what}{subset}); 2-layer LSTM(256), {embedding}',
  )
  return task


TASKS = {'sent140': load}
