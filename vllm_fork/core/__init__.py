"""What every part shares: typed errors, paths, git, atomic files and digests, logging, URLs made safe to show;
and, standard library only, the virtualenv's start-up hook that points `invoke` at the fork (invoke_root)."""
