"""Tower streaming logic, on the CPU: units, hooks, prediction, packing, warning.

On the CPU the "device copy" of a unit is a fresh host tensor and copies are
synchronous; everything else (which units exist, what the parameters point at
before, during and after each unit, what is kept in flight) is the code that
runs on the GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
from vllm.model_executor.offloader import PrefetchOffloader, UVAOffloader
from vllm.model_executor.offloader.tower_streaming import (
    TowerStreamer,
    split_units,
    warn_if_tower_computes_on_host,
)


class Block(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.seen_weight_ptrs: list[int] = []
        self.probe: Callable[[], None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen_weight_ptrs.append(self.fc.weight.data_ptr())
        if self.probe is not None:
            self.probe()
        return self.norm(torch.relu(self.fc(x)))


class Tower(nn.Module):
    """Shaped like a ViT: embed, a table read directly, blocks, side mergers."""

    def __init__(self, depth: int = 4, dim: int = 16):
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.pos = nn.Embedding(6, dim)  # read as a table, never called
        self.scale = nn.Parameter(torch.ones(dim))  # the tower's own parameter
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.side = nn.ModuleList([Block(dim)])  # runs after blocks[1]
        self.head = nn.Linear(dim, 4)
        self.register_buffer("offset", torch.full((dim,), 0.5))
        self.use_side = True

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.to(self.device)) * self.scale + self.pos.weight[0]
        h = h + self.offset
        for i, block in enumerate(self.blocks):
            h = block(h)
            if i == 1 and self.use_side and len(self.side) > 0:
                h = h + self.side[0](h)
        return self.head(h)


def make_tower(**kwargs: int) -> Tower:
    torch.manual_seed(0)
    return Tower(**kwargs)


def encode(tower: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return tower(x)


def host_bytes_of(streamer: TowerStreamer) -> list[tuple[int, int]]:
    return [
        (unit.host.data_ptr(), unit.host.data_ptr() + unit.nbytes)
        for tower in streamer.towers
        for unit in tower.units
    ]


def in_host_buffers(t: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    return t.device.type == "cpu" and any(a <= t.data_ptr() < b for a, b in ranges)


def test_units_follow_layer_containers():
    units = [(u.name, u.recurse) for u in split_units(make_tower())]
    assert units == [
        ("", False),  # `scale`, over the whole tower forward
        ("embed", True),
        ("pos", True),
        ("blocks.0", True),
        ("blocks.1", True),
        ("blocks.2", True),
        ("blocks.3", True),
        ("side.0", True),
        ("head", True),
    ]


def test_a_module_without_layer_containers_is_one_unit():
    mlp = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    holder = nn.Module()
    holder.mlp = nn.Linear(4, 4)
    assert [(u.name, u.recurse) for u in split_units(holder)] == [("", True)]
    # A Sequential is a layer container: its items are the units.
    assert [u.name for u in split_units(mlp)] == ["0", "2"]


def test_tower_offload_children_restricts_streaming():
    tower = make_tower()
    tower.tower_offload_children = ("blocks",)
    assert [u.name for u in split_units(tower)] == [f"blocks.{i}" for i in range(4)]

    resident = {n: p.data_ptr() for n, p in tower.named_parameters()}
    streamer = TowerStreamer()
    streamer.wrap(tower, "visual")
    for name, param in tower.named_parameters():
        moved = param.data_ptr() != resident[name]
        assert moved == name.startswith("blocks."), name


def test_tower_offload_children_must_name_children():
    tower = make_tower()
    tower.tower_offload_children = ("blocks", "nope")
    with pytest.raises(ValueError, match=r"Tower\.tower_offload_children.*'nope'"):
        split_units(tower)


def test_streamed_encode_equals_resident_and_weights_live_on_host_between():
    x = torch.randn(3, 8)
    tower = make_tower()
    reference = encode(tower, x)
    params_before = {n: p.detach().clone() for n, p in tower.named_parameters()}

    streamer = TowerStreamer()
    assert streamer.wrap(tower, "visual") is tower
    ranges = host_bytes_of(streamer)
    streamed = streamer.towers[0]
    assert streamed.host_bytes >= sum(
        p.numel() * p.element_size() for p in tower.parameters()
    )

    for _ in range(3):
        assert torch.equal(encode(tower, x), reference)
        # Between encodes: every parameter is a view of its unit's host
        # buffer, with the same values; nothing is in flight.
        for name, param in tower.named_parameters():
            assert in_host_buffers(param.data, ranges), name
            assert torch.equal(param, params_before[name]), name
        assert all(unit.is_packed() for unit in streamed.units)
        assert streamed.in_flight_units == []
    # Buffers are not streamed.
    assert tower.offset.data_ptr() != 0 and not in_host_buffers(tower.offset, ranges)


def test_each_unit_computes_on_its_own_copy():
    x = torch.randn(3, 8)
    tower = make_tower()
    streamer = TowerStreamer()
    streamer.wrap(tower, "visual")
    ranges = host_bytes_of(streamer)
    encode(tower, x)
    encode(tower, x)
    for block in [*tower.blocks, *tower.side]:
        assert len(block.seen_weight_ptrs) == 2
        # During its forward the block read a copy, not the host buffer, and
        # each encode got a fresh one.
        for ptr in block.seen_weight_ptrs:
            assert not any(a <= ptr < b for a, b in ranges)


def probe_in_flight(tower: Tower, streamer: TowerStreamer) -> list[tuple[str, list]]:
    """Record, inside each block's forward, which units are in flight."""
    streamed = streamer.towers[0]
    seen: list[tuple[str, list]] = []
    for name, module in tower.named_modules():
        if isinstance(module, Block):
            module.probe = lambda name=name: seen.append(
                (name, streamed.in_flight_units)
            )
    return seen


def test_next_units_are_learned_and_kept_in_flight():
    x = torch.randn(3, 8)
    tower = make_tower()
    streamer = TowerStreamer(lookahead=1)
    streamer.wrap(tower, "visual")
    streamed = streamer.towers[0]
    seen = probe_in_flight(tower, streamer)

    encode(tower, x)  # the first encode learns the order, prefetches nothing
    order = ["blocks.0", "blocks.1", "side.0", "blocks.2", "blocks.3"]
    assert seen == [(name, []) for name in order]
    name_of = {u.index: u.spec.name for u in streamed.units}
    learned = {name_of[a]: name_of[b] for a, b in streamed._successor.items()}
    # The tower's own parameter (`scale`) is onloaded for the whole encode,
    # apart from the sequence.
    assert name_of[streamed._first] == "embed"
    assert learned == {
        "embed": "blocks.0",
        "blocks.0": "blocks.1",
        "blocks.1": "side.0",
        "side.0": "blocks.2",
        "blocks.2": "blocks.3",
        "blocks.3": "head",
    }  # `pos` is read as a table, never called: never fetched ahead

    seen.clear()
    encode(tower, x)
    assert seen == [
        ("blocks.0", ["blocks.1"]),
        ("blocks.1", ["side.0"]),
        ("side.0", ["blocks.2"]),
        ("blocks.2", ["blocks.3"]),
        ("blocks.3", ["head"]),
    ]
    assert streamed.in_flight_units == []


def test_lookahead_bounds_the_units_in_flight():
    x = torch.randn(3, 8)
    tower = make_tower(depth=6)
    tower.side = nn.ModuleList()
    streamer = TowerStreamer(lookahead=2)
    streamer.wrap(tower, "visual")
    seen = probe_in_flight(tower, streamer)
    encode(tower, x)
    seen.clear()
    encode(tower, x)
    assert seen[0] == ("blocks.0", ["blocks.1", "blocks.2"])
    # The device memory of an encode: lookahead + 1 slots of the largest unit.
    largest = max(u.nbytes for u in streamer.towers[0].units if u.spec.recurse)
    assert streamer.towers[0]._ring is None  # none between encodes
    memory: list[int] = []
    tower.blocks[0].probe = lambda: memory.append(
        streamer.towers[0]._ring.memory.numel()
    )
    encode(tower, x)
    assert memory == [3 * largest]
    assert all(len(in_flight) <= 2 for _, in_flight in seen)
    assert seen[-1] == ("blocks.5", ["head"])


def test_a_changed_order_is_computed_right_and_relearned():
    x = torch.randn(3, 8)
    tower = make_tower()
    reference = {}
    for flag in (True, False):
        tower.use_side = flag
        reference[flag] = encode(tower, x)
    streamer = TowerStreamer(lookahead=2)
    streamer.wrap(tower, "visual")
    for flag in (True, True, False, False, True):
        tower.use_side = flag  # the prefetched `side.0` is not used / missing
        assert torch.equal(encode(tower, x), reference[flag]), flag
    assert streamer.towers[0].in_flight_units == []


def test_unit_called_outside_an_encode_is_onloaded_alone():
    tower = make_tower()
    streamer = TowerStreamer()
    streamer.wrap(tower, "visual")
    encode(tower, torch.randn(3, 8))
    with torch.inference_mode():
        tower.blocks[2](torch.randn(3, 16))
    assert streamer.towers[0].in_flight_units == []
    assert all(unit.is_packed() for unit in streamer.towers[0].units)


def test_weight_loading_writes_into_the_host_copies():
    x = torch.randn(3, 8)
    source = Tower()
    expected = encode(source, x)
    tower = make_tower()
    streamer = TowerStreamer()
    streamer.wrap(tower, "visual")
    ranges = host_bytes_of(streamer)
    for name, param in tower.named_parameters():
        param.data.copy_(source.get_parameter(name))  # what weight loaders do
        assert in_host_buffers(param.data, ranges)
    streamer.post_init()
    assert torch.equal(encode(tower, x), expected)


def test_post_init_repacks_replaced_parameters():
    x = torch.randn(3, 8)
    tower = make_tower()
    streamer = TowerStreamer()
    streamer.wrap(tower, "visual")
    # What process_weights_after_loading may do: new tensors, new Parameters.
    tower.blocks[0].fc.weight.data = tower.blocks[0].fc.weight.data * 2
    tower.head.weight = nn.Parameter(tower.head.weight.data + 1, requires_grad=False)
    unit_of = {u.spec.name: u for u in streamer.towers[0].units}
    assert not unit_of["blocks.0"].is_packed() and not unit_of["head"].is_packed()
    expected = encode(make_tower_like(tower), x)

    streamer.post_init()
    assert all(unit.is_packed() for unit in streamer.towers[0].units)
    assert torch.equal(encode(tower, x), expected)


def make_tower_like(tower: Tower) -> Tower:
    copy = make_tower()
    with torch.no_grad():
        for name, param in copy.named_parameters():
            param.copy_(tower.get_parameter(name))
    return copy


def test_parameters_shared_between_units_are_refused():
    tower = make_tower()
    tower.blocks[1].fc.weight = tower.blocks[0].fc.weight
    with pytest.raises(ValueError, match="shares parameters"):
        TowerStreamer().wrap(tower, "visual")


def test_towers_without_materialized_parameters_are_left_alone():
    streamer = TowerStreamer()
    empty = nn.Module()
    assert streamer.wrap(empty, "audio_tower") is empty
    with torch.device("meta"):
        on_meta = make_tower()
    assert streamer.wrap(on_meta, "visual") is on_meta
    assert streamer.towers == []


@pytest.fixture
def offloader_log():
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("vllm.model_executor.offloader.tower_streaming")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def test_warns_when_a_tower_device_follows_a_streamed_weight(offloader_log):
    tower = make_tower()
    TowerStreamer().wrap(tower, "visual")
    assert tower.device == torch.device("cpu")
    # A tower built on an accelerator would now report the host.
    assert warn_if_tower_computes_on_host("visual", tower, torch.device("cuda", 0))
    message = offloader_log[-1].getMessage()
    assert offloader_log[-1].levelno == logging.WARNING
    assert "'visual' (Tower)" in message
    assert "device=cpu" in message and "cuda:0" in message
    assert "tower_offload_children" in message


def test_no_warning_when_the_device_is_right_or_unknown(offloader_log):
    class Anchored(Tower):
        @property
        def device(self) -> torch.device:
            return torch.device("cuda", 0)

    cuda = torch.device("cuda", 0)
    assert not warn_if_tower_computes_on_host("visual", Anchored(), cuda)
    assert not warn_if_tower_computes_on_host("visual", nn.Linear(2, 2), cuda)
    # Computing on the CPU anyway: nothing to warn about.
    assert not warn_if_tower_computes_on_host(
        "visual", make_tower(), torch.device("cpu")
    )
    assert offloader_log == []


def test_prefetch_offloader_keeps_towers_apart_from_the_decoder_stack():
    offloader = PrefetchOffloader(
        group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True
    )
    image, audio = make_tower(), make_tower()
    assert offloader.wrap_tower(image, prefix="visual") is image
    assert offloader.wrap_tower(audio, prefix="audio_tower") is audio
    assert offloader.tower_streamer is not None
    assert [t.name for t in offloader.tower_streamer.towers] == [
        "visual",
        "audio_tower",
    ]
    # The decoder stack is wrapped once, after the towers, and left resident
    # with offload_group_size 0.
    layers = [nn.Linear(4, 4) for _ in range(3)]
    assert offloader.wrap_modules(iter(layers)) == layers
    assert all("forward" not in vars(layer) for layer in layers)
    assert offloader.module_offloaders == []
    offloader.post_init()  # towers only: nothing to allocate
    offloader.sync_prev_onload()
    offloader.join_after_forward()


def test_prefetch_offloader_without_the_option_takes_no_towers():
    offloader = PrefetchOffloader.__new__(PrefetchOffloader)
    assert PrefetchOffloader.supports_tower_offload is False
    assert UVAOffloader.supports_tower_offload is True
    # UVA's towers still go through wrap_modules (default wrap_tower).
    uva = UVAOffloader(cpu_offload_max_bytes=1 << 30)
    tower = make_tower()
    assert uva.wrap_tower(tower, prefix="visual") is tower
    del offloader
