"""What every part shares: typed errors, paths, git, atomic files and digests, logging, URLs made safe to show."""
