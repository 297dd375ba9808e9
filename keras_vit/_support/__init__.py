"""Small helpers the whole package shares, each in one place.

names.py          "did you mean" suggestions for a mistyped name
files.py          THE read path: regular files only, every whole read capped
progress.py       one progress line on stderr for long passes
tf_log.py         TensorFlow's C++ log lines, the command's quiet start, a converter's log held
private_keras.py  the version guard of every work-around on private Keras code
paths.py          where keras_vit keeps files: $KERAS_HOME/keras_vit
checks.py         positive_int: the one check of an argument that counts something
"""
