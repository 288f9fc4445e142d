"""Invoke tasks: a thin layer over the vllm_fork package (`invoke --list`).

Minimal on this branch; the lead's tasks.py defines the rest. The docker task is
registered with the one line below.
"""

from invoke import Collection

from vllm_fork import tasks_docker

ns = Collection()
ns.add_task(tasks_docker.docker)
