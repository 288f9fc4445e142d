"""The deployment image: the engine that builds it, the stand-in base, the daemonless push."""
