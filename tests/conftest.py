import os

# Quiet TensorFlow's start-up banner in test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
