"""RandAugment and TrivialAugmentWide batched (`vitpos.data.AutoAugmentBatch`): each op on a group
is torchvision's op on each image, exactly; an image's draws replay torchvision's transform; the
draws are uniform and per image; the whole batched policy has the per-image policy's distribution.
The batched random-resized crop (`augment=rrc`): torchvision's box distribution and resized crop."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from vitpos.data import BATCH_POLICIES, SyntheticDataModule, random_resized_boxes, resized_crop
from vitpos.data.augment import NUM_MAGNITUDE_BINS, apply_op

pytestmark = pytest.mark.usefixtures("one_thread")
PER_IMAGE = {"randaugment": lambda: v2.RandAugment(num_ops=1), "trivialaugment": v2.TrivialAugmentWide}


def sample_images(count: int, seed: int = 0) -> torch.Tensor:
    """uint8 (count, 3, 24, 20): random noise, smooth gradients and a constant image (a flat
    histogram and a zero range: the edge cases of Equalize and AutoContrast), not square, so the
    two axes of the geometric ops differ."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, 256, (count, 3, 24, 20), dtype=torch.uint8, generator=generator)
    ramp = torch.linspace(0, 1, 20)[None, None, None, :] * torch.linspace(0.2, 1, 24)[None, None, :, None]
    gain = torch.rand(count, 3, 1, 1, generator=generator) * 255
    smooth = (ramp * gain).round().to(torch.uint8)
    images = torch.where(torch.arange(count)[:, None, None, None] % 2 == 0, noise, smooth)
    images[-1] = 77
    return images


def magnitude(policy, op: int, bin_: int, negate: bool, height: int, width: int) -> float:
    value = policy.magnitudes(height, width)[op][bin_]
    return -value if negate else value


@pytest.mark.parametrize("name", list(BATCH_POLICIES))
def test_each_op_on_a_group_is_torchvisions_op_on_each_image(name):
    """Every op, at the first, the policy's and the last bin, of either sign: one call on a group
    of images gives, exactly, what torchvision's functional op gives image by image. Exact, not
    close: the gathers replace the geometric and pointwise ops only where they copy torchvision's
    output bit for bit, and torchvision's other ops compute each image of a batch on its own."""
    policy, images = BATCH_POLICIES[name], sample_images(12)
    height, width = images.shape[-2:]
    for op, (op_name, (magnitudes, signed)) in enumerate(policy.space.items()):
        for bin_ in {0, policy.magnitude or 15, NUM_MAGNITUDE_BINS - 1} if magnitudes else {0}:
            for negate in (False, True) if signed else (False,):
                draws = (torch.full((12,), op), torch.full((12,), bin_), torch.full((12,), negate))
                value = magnitude(policy, op, bin_, negate, height, width)
                expected = torch.cat([apply_op(image[None], op_name, value) for image in images])
                assert torch.equal(policy.apply(images, *draws), expected), (op_name, bin_, negate)


@pytest.mark.parametrize("name", list(BATCH_POLICIES))
def test_a_batch_of_mixed_draws_gives_each_image_its_own_op(name):
    """Sorting into groups and back: image i of the batch gets its own draw, whatever the others drew."""
    policy, images = BATCH_POLICIES[name], sample_images(64, seed=1)
    torch.manual_seed(0)
    ops, bins, negate = policy.draw(64)
    assert len(set(ops.tolist())) == len(policy.names)  # every op in one batch: a real mix
    out = policy.apply(images, ops, bins, negate)
    for i, image in enumerate(images):
        value = magnitude(policy, int(ops[i]), int(bins[i]), bool(negate[i]), *images.shape[-2:])
        assert torch.equal(out[i], apply_op(image[None], policy.names[ops[i]], value)[0])


def replay_torchvision_draws(policy) -> tuple[int, int, bool]:
    """The draws torchvision's transform makes for one op, in its order, read with this policy's
    table: the op; for an op with magnitudes, the bin (TrivialAugment) and, if signed, the sign."""
    op = int(torch.randint(len(policy.names), ()))
    magnitudes, signed = policy.space[policy.names[op]]
    if magnitudes is None:
        return op, 0, False
    bin_ = policy.magnitude if policy.magnitude is not None else int(torch.randint(NUM_MAGNITUDE_BINS, ()))
    return op, bin_, signed and bool(torch.rand(()) <= 0.5)


@pytest.mark.parametrize("name", list(BATCH_POLICIES))
def test_one_draw_replays_torchvisions_transform_on_one_image(name):
    """torchvision's transform (RandAugment with one op, or TrivialAugmentWide) on an image, and
    this policy's op for the draws torchvision made, give the same image: the op table's order,
    magnitudes and signs, the fill and the interpolation are torchvision's. Every op and sign occurs."""
    policy, images, seen = BATCH_POLICIES[name], sample_images(8, seed=2), set()
    transform = PER_IMAGE[name]()
    for seed in range(400):
        image = images[seed % len(images)]
        torch.manual_seed(seed)
        expected = transform(image)
        torch.manual_seed(seed)
        op, bin_, negate = replay_torchvision_draws(policy)
        got = policy.apply(image[None], torch.tensor([op]), torch.tensor([bin_]), torch.tensor([negate]))[0]
        assert torch.equal(got, expected), (seed, policy.names[op], bin_, negate)
        seen.add((policy.names[op], negate))
    signed = {op for op, (_, is_signed) in policy.space.items() if is_signed}
    assert seen == {(op, False) for op in policy.names} | {(op, True) for op in signed}


def chi_square_p(counts: torch.Tensor) -> float:
    """p-value of counts against the uniform distribution over their cells (Pearson's chi-square)."""
    expected = counts.sum() / counts.numel()
    statistic = ((counts - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((counts.numel() - 1) / 2), statistic / 2))


@pytest.mark.parametrize("name", list(BATCH_POLICIES))
def test_draws_are_uniform_and_independent_per_image(name):
    """Seeded, so the p-values are fixed numbers; each must exceed 1e-3 (a wrong distribution, e.g.
    one op per batch, or a bin shared by the batch, gives p ~ 0)."""
    policy = BATCH_POLICIES[name]
    torch.manual_seed(0)
    ops, bins, negate = (torch.stack(draws) for draws in zip(*(policy.draw(128) for _ in range(160))))  # (160, 128)
    ops_count = len(policy.names)
    assert chi_square_p(torch.bincount(ops.flatten(), minlength=ops_count).double()) > 1e-3
    # per image: the ops of neighbouring images in a batch are independent (joint counts uniform)
    pairs = ops[:, :-1] * ops_count + ops[:, 1:]
    assert chi_square_p(torch.bincount(pairs.flatten(), minlength=ops_count**2).double()) > 1e-3
    signed = torch.tensor([policy.space[op][1] for op in policy.names])[ops]
    assert chi_square_p(torch.bincount(negate[signed].long(), minlength=2).double()) > 1e-3
    assert not negate[~signed].any()
    with_bins = torch.tensor([policy.space[op][0] is not None for op in policy.names])[ops]
    if policy.magnitude is None:  # TrivialAugment: a uniform bin per image
        assert chi_square_p(torch.bincount(bins[with_bins], minlength=NUM_MAGNITUDE_BINS).double()) > 1e-3
    else:
        assert (bins[with_bins] == policy.magnitude).all()


def kolmogorov_smirnov(a: torch.Tensor, b: torch.Tensor) -> float:
    """The two-sample KS statistic: the largest gap between the two empirical distributions."""
    values = torch.cat([a, b]).unique()
    cdf_a = torch.searchsorted(a.sort().values, values, right=True) / len(a)
    cdf_b = torch.searchsorted(b.sort().values, values, right=True) / len(b)
    return float((cdf_a - cdf_b).abs().max())


@pytest.mark.parametrize("name", list(BATCH_POLICIES))
def test_the_batched_policy_has_the_per_image_policys_distribution(name):
    """2000 copies of one image through the batched policy and through torchvision's transform
    (RandAugment with its 2 ops): the distributions of each output's mean pixel agree (two-sample
    KS below its 0.1% critical value, 1.95 sqrt(2/n)), and differ from the input's (it augments)."""
    policy, count = BATCH_POLICIES[name], 2000
    image = sample_images(2, seed=3)[1]  # a smooth image: every op changes it
    transform = v2.RandAugment() if name == "randaugment" else v2.TrivialAugmentWide()
    torch.manual_seed(0)
    batched = policy(image.expand(count, -1, -1, -1).contiguous()).double().mean((1, 2, 3))
    per_image = torch.stack([transform(image) for _ in range(count)]).double().mean((1, 2, 3))
    critical = 1.95 * (2 / count) ** 0.5
    assert kolmogorov_smirnov(batched, per_image) < critical
    unchanged = torch.full_like(batched, image.double().mean())
    assert kolmogorov_smirnov(batched, unchanged) > 5 * critical


def test_the_datamodule_augments_training_batches_only_before_the_crop():
    """augment=randaugment runs the batched policy on the uint8 batch at its native size (before the
    resize, crop and flip) and only while training: with crop and flip off, a training batch is the
    policy's output under the same seed, resized and normalised; evaluation batches are not augmented."""
    module = SyntheticDataModule(img_size=48, augment="randaugment", crop_padding=0, hflip=False)
    images = sample_images(16, seed=4)[:, :, :, :20].contiguous()
    torch.manual_seed(5)
    trained = module.preprocess(images, train=True)
    torch.manual_seed(5)
    expected = module.preprocess(BATCH_POLICIES["randaugment"](images), train=False)
    assert torch.equal(trained, expected)
    assert not torch.equal(trained, module.preprocess(images, train=False))


# ----------------------------------------------------------------------------------------------
# the batched random-resized crop (augment=rrc)


@pytest.mark.parametrize("scale, ratio", [((0.35, 1.0), (3 / 4, 4 / 3)), ((0.08, 0.5), (0.5, 2.0))])
def test_rrc_boxes_follow_torchvisions_scale_and_ratio_draw(scale, ratio):
    """Seeded histograms: the boxes' heights, widths and offsets have the distribution of
    torchvision v2 RandomResizedCrop.make_params on the same image, and every box lies in the image
    with its area share and aspect ratio in the ranges (up to the rounding of its sides)."""
    height, width, count = 24, 20, 20_000
    torch.manual_seed(0)
    top, left, box_h, box_w = random_resized_boxes(count, height, width, scale, ratio)
    assert (top >= 0).all() and (left >= 0).all() and (top + box_h <= height).all() and (left + box_w <= width).all()
    share, aspect = box_h * box_w / (height * width), box_w / box_h
    rounding = (box_h + box_w + 1) / (height * width)  # a side rounded by up to half a pixel
    assert (share >= scale[0] - rounding).all() and (share <= scale[1] + rounding).all()
    assert (aspect >= ratio[0] * (1 - 1 / box_h) - 1e-6).all() and (aspect <= ratio[1] * (1 + 1 / box_h) + 1e-6).all()
    transform = v2.RandomResizedCrop((height, width), scale=scale, ratio=ratio)
    image = torch.zeros(3, height, width)
    reference = [transform.make_params([image]) for _ in range(count)]
    for ours, key, bins in ((box_h, "height", height), (box_w, "width", width)):
        theirs = torch.tensor([params[key] for params in reference])
        frequencies = (
            torch.bincount(ours, minlength=bins + 1) / count,
            torch.bincount(theirs, minlength=bins + 1) / count,
        )
        assert (frequencies[0] - frequencies[1]).abs().max() < 0.015, key
    room = height - box_h  # the top offset is uniform over 0..room
    has_room = room > 0
    assert abs((top[has_room] / room[has_room]).mean() - 0.5) < 0.01


def test_rrc_falls_back_to_torchvisions_central_crop():
    """No draw fits (a ratio of 3-4 on a square image): every box is the central 32 x 11 crop."""
    torch.manual_seed(0)
    boxes = random_resized_boxes(8, 32, 32, (0.9, 1.0), (3.0, 4.0))
    reference = v2.RandomResizedCrop(32, scale=(0.9, 1.0), ratio=(3.0, 4.0)).make_params([torch.zeros(3, 32, 32)])
    expected = (reference["top"], reference["left"], reference["height"], reference["width"])
    assert all(tuple(int(values[i]) for values in boxes) == expected for i in range(8))


def test_rrc_output_is_torchvisions_resized_crop_of_each_box():
    """One grid_sample over the batch gives each image torchvision's resized_crop of its own box
    (bilinear, antialias=True) to 1e-5 on [0, 1] images, on a rectangular image."""
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(64, 3, 24, 20, generator=generator)
    torch.manual_seed(2)
    boxes = random_resized_boxes(64, 24, 20, (0.08, 1.0), (3 / 4, 4 / 3))
    out = resized_crop(images, *boxes)
    reference = torch.stack(
        [
            v2.functional.resized_crop(image, *(int(b[i]) for b in boxes), [24, 20], antialias=True)
            for i, image in enumerate(images)
        ]
    )
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=0)
    full = [
        torch.zeros(64, dtype=torch.long),
        torch.zeros(64, dtype=torch.long),
        torch.full((64,), 24),
        torch.full((64,), 20),
    ]
    torch.testing.assert_close(resized_crop(images, *full), images, atol=1e-5, rtol=0)  # the whole image: itself


def test_augment_rrc_crops_then_flips_from_the_runs_stream():
    """data.augment=rrc with hflip: a training batch is each image's random-resized crop, mirrored
    where the flip draw says so, both drawn from the global RNG (so a restored RNG state replays
    them); about half the images are mirrored; evaluation batches are not augmented."""
    module = SyntheticDataModule(img_size=32, augment="rrc", rrc_scale=[0.35, 1.0], hflip=True)
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(7)
    trained = module.preprocess(images, train=True)
    plain = module.preprocess(images, train=False)
    torch.manual_seed(7)
    cropped = resized_crop(plain, *random_resized_boxes(64, 32, 32, (0.35, 1.0), (3 / 4, 4 / 3)))
    flip = torch.rand(64) < 0.5
    torch.testing.assert_close(trained, torch.where(flip[:, None, None, None], cropped.flip(-1), cropped))
    assert 16 < int(flip.sum()) < 48 and not torch.allclose(trained, plain)
