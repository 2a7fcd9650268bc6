"""Results of run folders, sweeps and plots. Imports no TensorFlow."""
