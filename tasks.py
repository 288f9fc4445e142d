"""Invoke tasks (`invoke --list`): the collection, assembled from vllm_fork.cli."""

from invoke import Collection

from vllm_fork.cli import build, docker, queue, rebase

ns = Collection(queue.apply, queue.export, queue.check, queue.status, build.build, build.verify, build.ops)
ns.add_task(docker.docker)
ns.add_task(rebase.rebase)
