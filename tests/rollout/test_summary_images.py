"""A vision chain's JSON record (validation samples, rollout dumps) names its images by grid,
token count and digest: the pixels are not written, and the chain keeps them."""

from __future__ import annotations

import json

import torch

from agentfly.core.images import ImageInput, pixel_digest
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.summary import trajectory_record


def test_a_chain_with_images_is_written_as_json_without_its_pixels():
    pixels = torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6)
    image = ImageInput(pixel_values=pixels, grid_thw=(1, 2, 2), num_tokens=1)
    traj = Trajectory(prompt_ids=[1, 2, 3], images=[image])

    record = json.loads(json.dumps(trajectory_record(traj)))

    assert record["images"] == [{"grid_thw": [1, 2, 2], "num_tokens": 1, "digest": pixel_digest(pixels, (1, 2, 2))}]
    assert record["prompt_ids"] == [1, 2, 3]
    assert traj.images == [image] and traj.images[0].pixel_values is pixels  # the chain keeps its images
