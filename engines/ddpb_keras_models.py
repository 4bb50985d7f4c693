"""ddpb_keras_models: common/model_table.h's models in Keras, for the tensorflow engine.

Written to match the PyTorch definitions layer by layer (tests/integration/test_engines.py
checks every trainable-parameter count against common/model_table.c): keras.applications'
VGG16 and MobileNetV2 already do; its ResNets do not (their convolutions carry biases), so
ResNet-18/50 are built here as torchvision builds them (bias-free convolutions, batch norm,
BasicBlock / Bottleneck with the stride on the 3x3). Inputs are NHWC, as TensorFlow's CPU
convolutions require; ddpb_data's NCHW batches are transposed by the engine.

Decision: batch norm's moving mean and variance are not trainable in Keras and buffers in
torch, so both counts leave them out; initial values follow Keras's initializers from
tf.random.set_seed(spec seed), not torch's (engines agree on shapes, not on draws)."""
import tensorflow as tf
from tensorflow.keras import layers


def mnist_cnn(c, h, w, classes):
    return tf.keras.Sequential([
        tf.keras.Input((h, w, c)),
        layers.Conv2D(10, 5), layers.MaxPool2D(2), layers.ReLU(),
        layers.Conv2D(20, 5), layers.SpatialDropout2D(0.5), layers.MaxPool2D(2), layers.ReLU(),
        layers.Flatten(), layers.Dense(50, activation="relu"), layers.Dropout(0.5),
        layers.Dense(classes)], name="mnist_cnn")


def lenet5(c, h, w, classes):
    return tf.keras.Sequential([
        tf.keras.Input((h, w, c)),
        layers.Conv2D(6, 5, padding="same", activation="relu"), layers.MaxPool2D(2),
        layers.Conv2D(16, 5, activation="relu"), layers.MaxPool2D(2), layers.Flatten(),
        layers.Dense(120, activation="relu"), layers.Dense(84, activation="relu"),
        layers.Dense(classes)], name="lenet5")


def _alexnet_features(x, stem_pad, pool, pool_stride):
    x = layers.ZeroPadding2D(stem_pad)(x)
    x = layers.Conv2D(64, 11, 4, activation="relu")(x)
    x = layers.MaxPool2D(pool, pool_stride)(x)
    x = layers.Conv2D(192, 5, padding="same", activation="relu")(x)
    x = layers.MaxPool2D(pool, pool_stride)(x)
    for f in (384, 256, 256):
        x = layers.Conv2D(f, 3, padding="same", activation="relu")(x)
    return layers.MaxPool2D(pool, pool_stride)(x)


def alexnet(c, h, w, classes):
    inp = tf.keras.Input((h, w, c))
    x = _alexnet_features(inp, 2, 3, 2)
    # torchvision's AdaptiveAvgPool2d((6, 6)): at 224x224 the features are already 6x6
    x = layers.Flatten()(x)
    for _ in range(2):
        x = layers.Dropout(0.5)(x)
        x = layers.Dense(4096, activation="relu")(x)
    return tf.keras.Model(inp, layers.Dense(classes)(x), name="alexnet")


def alexnet_cifar(c, h, w, classes):
    inp = tf.keras.Input((h, w, c))
    x = layers.Flatten()(_alexnet_features(inp, 5, 2, 2))
    return tf.keras.Model(inp, layers.Dense(classes)(x), name="alexnet_cifar")


def _bn(x):
    return layers.BatchNormalization(epsilon=1e-5, momentum=0.9)(x)


def _conv(x, f, k, s=1):
    if k > 1:
        x = layers.ZeroPadding2D(k // 2)(x)
    return layers.Conv2D(f, k, s, use_bias=False)(x)


def _basic(x, f, s):
    short = x
    y = layers.ReLU()(_bn(_conv(x, f, 3, s)))
    y = _bn(_conv(y, f, 3))
    if s != 1 or x.shape[-1] != f:
        short = _bn(_conv(x, f, 1, s))
    return layers.ReLU()(layers.Add()([y, short]))


def _bottleneck(x, f, s):
    short = x
    y = layers.ReLU()(_bn(_conv(x, f, 1)))
    y = layers.ReLU()(_bn(_conv(y, f, 3, s)))
    y = _bn(_conv(y, f * 4, 1))
    if s != 1 or x.shape[-1] != f * 4:
        short = _bn(_conv(x, f * 4, 1, s))
    return layers.ReLU()(layers.Add()([y, short]))


def resnet(c, h, w, classes, blocks, block, cifar=False, name="resnet"):
    inp = tf.keras.Input((h, w, c))
    if cifar:  # 3x3 stem, no max pool
        x = layers.ReLU()(_bn(_conv(inp, 64, 3)))
    else:
        x = layers.ReLU()(_bn(_conv(inp, 64, 7, 2)))
        x = layers.MaxPool2D(3, 2)(layers.ZeroPadding2D(1)(x))
    for stage, n in enumerate(blocks):
        for i in range(n):
            x = block(x, 64 << stage, 2 if stage > 0 and i == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inp, layers.Dense(classes)(x), name=name)


def build(name, c, h, w, classes):
    """The named model for NHWC inputs (h, w, c) and `classes` logits."""
    if name == "mnist-cnn":
        return mnist_cnn(c, h, w, classes)
    if name == "lenet5":
        return lenet5(c, h, w, classes)
    if name == "alexnet":
        return alexnet(c, h, w, classes)
    if name == "alexnet-cifar":
        return alexnet_cifar(c, h, w, classes)
    if name == "resnet18":
        return resnet(c, h, w, classes, (2, 2, 2, 2), _basic, name="resnet18")
    if name == "resnet18-cifar":
        return resnet(c, h, w, classes, (2, 2, 2, 2), _basic, cifar=True, name="resnet18_cifar")
    if name == "resnet50":
        return resnet(c, h, w, classes, (3, 4, 6, 3), _bottleneck, name="resnet50")
    if name == "vgg16":
        return tf.keras.applications.VGG16(weights=None, input_shape=(h, w, c),
                                           classes=classes, classifier_activation=None)
    if name == "mobilenetv2":
        return tf.keras.applications.MobileNetV2(weights=None, input_shape=(h, w, c),
                                                 classes=classes, classifier_activation=None)
    raise ValueError(f"model: {name!r} has no Keras definition here")


def count_params(model):
    return sum(int(tf.size(v)) for v in model.trainable_variables)
