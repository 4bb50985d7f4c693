"""ddpb_keras_models: common/model_table.h's models in Keras, for the tensorflow engine.

Written to match the PyTorch definitions layer by layer (tests/integration/test_engines.py
checks every trainable-parameter count against common/model_table.c): keras.applications'
VGG16 and MobileNetV2 already do; its ResNets do not (their convolutions carry biases), so
ResNet-18/50/101/152 are built here as torchvision builds them (bias-free convolutions,
batch norm, BasicBlock / Bottleneck with the stride on the 3x3), and its InceptionV3 does not
either (batch norm without scale), so Inception V3 is torchvision's written in Keras. VGG-11
and the CIFAR forms (kuangliu's, DeepSpeed's Net) have no keras.applications model. Inputs
are NHWC, as TensorFlow's CPU convolutions require; ddpb_data's NCHW batches are transposed
by the engine.

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


def _vgg_convs(x, cfg, bn=False, bias=True):
    """VGG's 3x3 convolutions (padded 1) and 2x2 max pools (0 in cfg); bn: conv, BN, ReLU."""
    for v in cfg:
        if v == 0:
            x = layers.MaxPool2D(2)(x)
        elif bn:
            x = layers.ReLU()(_bn(layers.Conv2D(v, 3, padding="same", use_bias=bias)(x)))
        else:
            x = layers.Conv2D(v, 3, padding="same", activation="relu")(x)
    return x


def vgg11(c, h, w, classes):
    """torchvision's VGG-11 (cfg "A", no BN); keras.applications has no VGG-11. At 224x224
    the features are 7x7, where torchvision's adaptive pool is the identity."""
    inp = tf.keras.Input((h, w, c))
    x = layers.Flatten()(_vgg_convs(inp, (64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0)))
    for _ in range(2):
        x = layers.Dropout(0.5)(layers.Dense(4096, activation="relu")(x))
    return tf.keras.Model(inp, layers.Dense(classes)(x), name="vgg11")


def vgg16_cifar(c, h, w, classes):
    """kuangliu's CIFAR VGG16 (DDLBench's): conv (bias) + BN + ReLU, one linear layer."""
    inp = tf.keras.Input((h, w, c))
    x = _vgg_convs(inp, (64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0,
                         512, 512, 512, 0), bn=True)
    return tf.keras.Model(inp, layers.Dense(classes)(layers.Flatten()(x)), name="vgg16_cifar")


def _cifar_mbv2_block(x, out, t, stride):
    """kuangliu's MobileNetV2 Block (see ddpb_torch_models.MobileNetV2Cifar)."""
    inp = x.shape[-1]
    y = layers.ReLU()(_bn(_conv(x, t * inp, 1)))
    y = layers.ZeroPadding2D(1)(y)
    y = layers.ReLU()(_bn(layers.DepthwiseConv2D(3, stride, use_bias=False)(y)))
    y = _bn(_conv(y, out, 1))
    if stride != 1:
        return y
    short = x if inp == out else _bn(_conv(x, out, 1))
    return layers.Add()([y, short])


def mobilenetv2_cifar(c, h, w, classes):
    inp = tf.keras.Input((h, w, c))
    x = layers.ReLU()(_bn(_conv(inp, 32, 3)))
    for t, out, n, stride in ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                              (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            x = _cifar_mbv2_block(x, out, t, stride if i == 0 else 1)
    x = layers.GlobalAveragePooling2D()(layers.ReLU()(_bn(_conv(x, 1280, 1))))
    return tf.keras.Model(inp, layers.Dense(classes)(x), name="mobilenetv2_cifar")


def deepspeed_cifar_net(c, h, w, classes):
    """DeepSpeedExamples' cifar10_deepspeed.py Net: 62,006 parameters at 32x32x3, 10."""
    return tf.keras.Sequential([
        tf.keras.Input((h, w, c)),
        layers.Conv2D(6, 5, activation="relu"), layers.MaxPool2D(2),
        layers.Conv2D(16, 5, activation="relu"), layers.MaxPool2D(2), layers.Flatten(),
        layers.Dense(120, activation="relu"), layers.Dense(84, activation="relu"),
        layers.Dense(classes)], name="deepspeed_cifar_net")


def _basic_conv(x, f, kh, kw=None, s=1, pad=0):
    """torchvision's Inception BasicConv2d: conv (no bias, padding (kh//2, kw//2) when pad)
    -> BN (eps 0.001) -> ReLU."""
    kw = kh if kw is None else kw
    if pad:
        x = layers.ZeroPadding2D((kh // 2, kw // 2))(x)
    x = layers.Conv2D(f, (kh, kw), s, use_bias=False)(x)
    return layers.ReLU()(layers.BatchNormalization(epsilon=1e-3, momentum=0.9)(x))


def _branch_pool(x, f):
    """F.avg_pool2d(x, 3, 1, 1) (count_include_pad, as torch's default), then a 1x1."""
    x = layers.AveragePooling2D(3, 1)(layers.ZeroPadding2D(1)(x))
    return _basic_conv(x, f, 1)


def _inception_a(x, pool_features):
    b1 = _basic_conv(x, 64, 1)
    b5 = _basic_conv(_basic_conv(x, 48, 1), 64, 5, pad=1)
    b3 = _basic_conv(_basic_conv(_basic_conv(x, 64, 1), 96, 3, pad=1), 96, 3, pad=1)
    return layers.Concatenate()([b1, b5, b3, _branch_pool(x, pool_features)])


def _inception_b(x):
    b3 = _basic_conv(x, 384, 3, s=2)
    bd = _basic_conv(_basic_conv(_basic_conv(x, 64, 1), 96, 3, pad=1), 96, 3, s=2)
    return layers.Concatenate()([b3, bd, layers.MaxPool2D(3, 2)(x)])


def _inception_c(x, c7):
    b1 = _basic_conv(x, 192, 1)
    b7 = _basic_conv(_basic_conv(_basic_conv(x, c7, 1), c7, 1, 7, pad=1), 192, 7, 1, pad=1)
    bd = _basic_conv(x, c7, 1)
    for f, (kh, kw) in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
        bd = _basic_conv(bd, f, kh, kw, pad=1)
    return layers.Concatenate()([b1, b7, bd, _branch_pool(x, 192)])


def _inception_d(x):
    b3 = _basic_conv(_basic_conv(x, 192, 1), 320, 3, s=2)
    b7 = _basic_conv(x, 192, 1)
    b7 = _basic_conv(_basic_conv(b7, 192, 1, 7, pad=1), 192, 7, 1, pad=1)
    b7 = _basic_conv(b7, 192, 3, s=2)
    return layers.Concatenate()([b3, b7, layers.MaxPool2D(3, 2)(x)])


def _inception_e(x):
    b1 = _basic_conv(x, 320, 1)
    y = _basic_conv(x, 384, 1)
    b3 = layers.Concatenate()([_basic_conv(y, 384, 1, 3, pad=1), _basic_conv(y, 384, 3, 1, pad=1)])
    y = _basic_conv(_basic_conv(x, 448, 1), 384, 3, pad=1)
    bd = layers.Concatenate()([_basic_conv(y, 384, 1, 3, pad=1), _basic_conv(y, 384, 3, 1, pad=1)])
    return layers.Concatenate()([b1, b3, bd, _branch_pool(x, 192)])


def inception_v3(c, h, w, classes):
    """torchvision's inception_v3(aux_logits=False), layer by layer: keras.applications'
    InceptionV3 is another network for counting (its batch norms have no scale, gamma), so
    this one keeps torch's parameters; tests/integration/test_engines.py states the
    difference. At least 75x75."""
    inp = tf.keras.Input((h, w, c))
    x = _basic_conv(inp, 32, 3, s=2)
    x = _basic_conv(x, 32, 3)
    x = _basic_conv(x, 64, 3, pad=1)
    x = layers.MaxPool2D(3, 2)(x)
    x = _basic_conv(_basic_conv(x, 80, 1), 192, 3)
    x = layers.MaxPool2D(3, 2)(x)
    for pf in (32, 64, 64):
        x = _inception_a(x, pf)
    x = _inception_b(x)
    for c7 in (128, 160, 160, 192):
        x = _inception_c(x, c7)
    x = _inception_e(_inception_e(_inception_d(x)))
    x = layers.Dropout(0.5)(layers.GlobalAveragePooling2D()(x))
    return tf.keras.Model(inp, layers.Dense(classes)(x), name="inception_v3")


# name -> (blocks per stage, block, CIFAR stem): the ResNets built here as torchvision's
RESNETS = {"resnet18": ((2, 2, 2, 2), _basic, False),
           "resnet18-cifar": ((2, 2, 2, 2), _basic, True),
           "resnet50": ((3, 4, 6, 3), _bottleneck, False),
           "resnet101": ((3, 4, 23, 3), _bottleneck, False),
           "resnet152": ((3, 8, 36, 3), _bottleneck, False),
           "resnet50-cifar": ((3, 4, 6, 3), _bottleneck, True)}
# the other models written here: name -> builder(c, h, w, classes)
BUILDERS = {"mnist-cnn": mnist_cnn, "lenet5": lenet5, "alexnet": alexnet,
            "alexnet-cifar": alexnet_cifar, "vgg11": vgg11, "vgg16-cifar": vgg16_cifar,
            "mobilenetv2-cifar": mobilenetv2_cifar, "deepspeed-cifar-net": deepspeed_cifar_net,
            "inception-v3": inception_v3}


def build(name, c, h, w, classes):
    """The named model for NHWC inputs (h, w, c) and `classes` logits."""
    if name in RESNETS:
        blocks, block, cifar = RESNETS[name]
        return resnet(c, h, w, classes, blocks, block, cifar=cifar, name=name.replace("-", "_"))
    if name in BUILDERS:
        return BUILDERS[name](c, h, w, classes)
    if name == "vgg16":
        return tf.keras.applications.VGG16(weights=None, input_shape=(h, w, c),
                                           classes=classes, classifier_activation=None)
    if name == "mobilenetv2":
        return tf.keras.applications.MobileNetV2(weights=None, input_shape=(h, w, c),
                                                 classes=classes, classifier_activation=None)
    raise ValueError(f"model: {name!r} has no Keras definition here")


def count_params(model):
    return sum(int(tf.size(v)) for v in model.trainable_variables)
