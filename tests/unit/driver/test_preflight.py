"""orchestrate.placement.preflight: node groups against a live cluster's nodes (ray.nodes() rows)."""
import pytest

from launcher.driver.actors.placement import PlacementError, preflight


def _node(ip: str, **resources: float) -> dict:
    return {"Alive": True, "NodeID": ip.replace(".", "") * 4, "NodeManagerAddress": ip, "Resources": resources}


def _groups(nodes: int, gpus: int, **extra: float) -> dict[int, list[dict]]:
    return {n: [{"GPU": 1.0, **extra} for _ in range(gpus)] for n in range(nodes)}


def test_groups_that_fit_pass():
    preflight(_groups(2, 2), [_node("10.0.0.1", CPU=8, GPU=2), _node("10.0.0.2", CPU=8, GPU=2)], "Ray")
    preflight(_groups(2, 2), [_node("10.0.0.1", CPU=8, GPU=4)], "Ray")  # two groups share a big node


def test_too_few_gpus_per_node_names_both_sides():
    with pytest.raises(PlacementError) as err:
        preflight(_groups(1, 8), [_node("10.0.0.1", CPU=2, GPU=2), _node("10.0.0.2", CPU=2, GPU=2)], "the Ray cluster")
    msg = str(err.value)
    assert "logical node 0: GPU 8" in msg
    assert "10.0.0.1 (node 10001100): CPU 2, GPU 2" in msg and "10.0.0.2" in msg
    assert "cluster.gpus_per_node" in msg


def test_dead_nodes_and_missing_custom_resources_do_not_count():
    dead = {**_node("10.0.0.2", CPU=2, GPU=2), "Alive": False}
    with pytest.raises(PlacementError, match="1 alive node"):
        preflight(_groups(2, 2), [_node("10.0.0.1", CPU=2, GPU=2), dead], "Ray")
    with pytest.raises(PlacementError, match="node_1 2"):
        preflight({0: [{"GPU": 1.0, "node_0": 1.0}] * 2, 1: [{"GPU": 1.0, "node_1": 1.0}] * 2},
                  [_node("10.0.0.1", CPU=2, GPU=4, node_0=2)], "Ray")


def test_distinct_gives_every_logical_node_its_own_ray_node():
    big = _node("10.0.0.1", CPU=8, GPU=4)
    assert preflight(_groups(2, 2), [big], "Ray") == {0: big, 1: big}
    with pytest.raises(PlacementError, match="each on a Ray node of its own"):
        preflight(_groups(2, 2), [big], "Ray", distinct=True)
    other = _node("10.0.0.2", CPU=8, GPU=2)
    hosts = preflight(_groups(2, 2), [big, other], "Ray", distinct=True)
    assert {h["NodeManagerAddress"] for h in hosts.values()} == {"10.0.0.1", "10.0.0.2"}
