"""The Docker image: the Dockerfile and build commands, the stages' helpers, the wheel it takes."""
