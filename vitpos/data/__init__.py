"""Datasets as LightningDataModules, held in memory as uint8 tensors.

Every dataset is loaded once into `(N, C, H, W)` uint8 images and `(N,)` int64 labels. The
standard augmentation (random crop with padding, horizontal flip), the resize to `img_size` and
the normalisation run batched on the training device in `on_after_batch_transfer`, so the loader
only indexes tensors. With `device_resident` (the default on CUDA) the uint8 set itself lives on
the training device and each batch is one indexing of it (`DeviceBatches`): no per-sample Python,
no collate, no host-to-device copy per step. The `randaugment` / `trivialaugment` policies run
batched there too, before the resize: each image draws its own ops, each op runs once per group;
`rrc`, a random-resized crop, replaces the padded crop. Below the dataset's own resolution a split
is downsampled once, when loaded (`downsample`); `pixels_label` names native, downsampled, upsampled.

- `cifar10`: CIFAR-10 from the pickled batches (torchvision's download), the official archive or
  an image tree of it (e.g. a JPEG copy), whichever `data.root` or the data folder holds.
- `image_folder`: any `train/<class>/` + `test/<class>/` tree of JPEG/PNG files, or its archive.
- `fashion_mnist`: Debian's `dataset-fashion-mnist` files when installed, else torchvision's
  download; resized to `img_size`, 1 channel.
- `synthetic`: generated in memory, deterministic by seed; the label is the relative placement of
  two shapes, so a model without positions cannot beat chance.

One module per job: `sampling` (dataset indexing, sharded resumable order, device-resident
batches), `augment` (the policies and the batched crop/flip), `datamodule` (the `ImageDataModule`
base), one module per dataset family (`cifar10`, `image_folder` with the image-tree reader and
its cache, `fashion_mnist`, `synthetic`). Every public name is re-exported here: configs'
`_target_: vitpos.data.<Class>` (also those saved in earlier checkpoints) resolve through it.
"""

from .augment import (
    AUGMENTS,
    BATCH_POLICIES,
    AutoAugmentBatch,
    random_crop_flip,
    random_resized_boxes,
    random_resized_crop,
    resized_crop,
)
from .cifar10 import (
    CIFAR10_ARCHIVE,
    CIFAR10_BATCHES,
    CIFAR10_CLASSES,
    CIFAR10_FOLDER,
    CIFAR10_IMAGE_TREES,
    CIFAR10DataModule,
    is_cifar10_archive,
    read_cifar10,
    read_cifar10_archive,
    unpickle_cifar10,
)
from .datamodule import ImageDataModule, describe_pixels, downsample, pixels_label
from .fashion_mnist import DEBIAN_FASHION_MNIST, FashionMNISTDataModule, read_idx
from .image_folder import ImageFolderDataModule, ImageSplits, load_image_tree
from .sampling import DeviceBatches, ResumableDataLoader, ShardedSampler, UInt8ImageDataset
from .synthetic import DIRECTIONS, SyntheticDataModule, make_synthetic

__all__ = [
    "AUGMENTS",
    "BATCH_POLICIES",
    "CIFAR10_ARCHIVE",
    "CIFAR10_BATCHES",
    "CIFAR10_CLASSES",
    "CIFAR10_FOLDER",
    "CIFAR10_IMAGE_TREES",
    "DEBIAN_FASHION_MNIST",
    "DIRECTIONS",
    "AutoAugmentBatch",
    "CIFAR10DataModule",
    "DeviceBatches",
    "FashionMNISTDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
    "ImageSplits",
    "ResumableDataLoader",
    "ShardedSampler",
    "SyntheticDataModule",
    "UInt8ImageDataset",
    "is_cifar10_archive",
    "load_image_tree",
    "make_synthetic",
    "random_crop_flip",
    "random_resized_boxes",
    "random_resized_crop",
    "resized_crop",
    "describe_pixels",
    "downsample",
    "pixels_label",
    "read_cifar10",
    "read_cifar10_archive",
    "read_idx",
    "unpickle_cifar10",
]
