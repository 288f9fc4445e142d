"""What the image tests read inside a running container (stdlib only: the base's python3).

`PROBE` runs as `python3 -c PROBE SITE` in the container and prints one JSON object:
vllm's version as `import vllm` reports it; every file of the installed vllm's RECORD
checked against its hash; files under the package that RECORD does not list (bytecode
aside); where `vllm-rs` and the healthcheck's interpreter resolve; and a manifest of the
vllm files, the console script and /usr/share/vllm-fork (path -> sha256, exec bit; for
bytecode the sha256 of the code after the 16-byte header, whose mtime differs by install).
"""

PROBE = r"""
import base64, csv, hashlib, importlib.metadata as md, json, os, shutil, subprocess, sys, warnings
warnings.filterwarnings("ignore")
site = sys.argv[1]
def sha(path, skip=0):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()[skip:]).hexdigest()
out = {}
import vllm
out["version"] = vllm.__version__
dist = md.distribution("vllm")
out["dist_version"] = dist.version
out["dist_infos"] = sorted(n for n in os.listdir(site) if n.startswith("vllm-") and n.endswith(".dist-info"))
bad, listed = [], set()
for row in csv.reader(open(os.path.join(str(dist._path), "RECORD"))):
    if not row:
        continue
    path = os.path.normpath(os.path.join(site, row[0]))
    listed.add(path)
    if not row[1]:
        continue
    algo, _, want = row[1].partition("=")
    if not os.path.isfile(path):
        bad.append([row[0], "missing"])
        continue
    got = base64.urlsafe_b64encode(hashlib.new(algo, open(path, "rb").read()).digest()).rstrip(b"=").decode()
    if got != want:
        bad.append([row[0], "hash"])
out["record_bad"] = bad
out["record_rows"] = len(listed)
unlisted = []
for dirpath, dirnames, filenames in os.walk(os.path.join(site, "vllm")):
    for name in filenames:
        path = os.path.join(dirpath, name)
        if path not in listed and not name.endswith(".pyc"):
            unlisted.append(os.path.relpath(path, site))
out["unlisted"] = sorted(unlisted)
rs = shutil.which("vllm-rs")
out["vllm_rs"] = [rs, os.path.realpath(rs) if rs else None,
                  subprocess.run([rs, "--version"], capture_output=True, text=True).stdout.strip() if rs else None]
out["python3"] = shutil.which("python3")
files = {}
roots = [os.path.join(site, "vllm"), os.path.join(site, str(dist._path.name)), "/usr/share/vllm-fork"]
for root in roots:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            files[path] = [sha(path, 16 if name.endswith(".pyc") else 0), bool(os.stat(path).st_mode & 0o100)]
files["/usr/local/bin/vllm"] = [sha("/usr/local/bin/vllm"), True]
out["files"] = files
print(json.dumps(out))
"""
