"""Learning blocks: what a production port of an algorithm takes.

The client works (simulation and production flavours), the statistics they
report and the composition into a `tff.learning.templates.LearningProcess`.
Public `tff.*` API only (tests/commands/test_layers.py checks it).
"""

from tff_algos.learning.client_definition import Batch
from tff_algos.learning.client_definition import ClientDefinition
from tff_algos.learning.client_definition import ClientInfo
from tff_algos.learning.client_definition import ClientOutput
from tff_algos.learning.client_definition import DefinedTraining
from tff_algos.learning.client_definition import Shared
from tff_algos.learning.client_work import client_weighting
from tff_algos.learning.client_work import ClientInput
from tff_algos.learning.client_work import ComputedInput
from tff_algos.learning.client_work import DatasetInput
from tff_algos.learning.client_work import MetricsAggregator
from tff_algos.learning.client_work import ModelFn
from tff_algos.learning.client_work import ScheduledInput
from tff_algos.learning.client_work import StoredInput
from tff_algos.learning.client_work import takes_stored_input
from tff_algos.learning.composition import build_process
from tff_algos.learning.composition import compose
from tff_algos.learning.composition import ComputedProcess
from tff_algos.learning.composition import ComputedUnavailable
from tff_algos.learning.composition import initial_model_weights
from tff_algos.learning.composition import model_weights
from tff_algos.learning.composition import ModelAggregator
from tff_algos.learning.local_sgd import build_gradient_client_work
from tff_algos.learning.local_sgd import build_proximal_sgd_client_work
from tff_algos.learning.local_sgd import FULL_BATCH_GRADIENT
from tff_algos.learning.local_sgd import proximal_sgd
