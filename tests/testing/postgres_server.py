#!/usr/bin/env python3
"""A throwaway PostgreSQL server for the tests (Debian's postgresql package: initdb and pg_ctl).

It lives in a fresh temporary directory and listens on a Unix socket there only (no TCP port
to collide with), trusting local connections as the user `shardlm`. Run as root, the server
runs as the `postgres` user (PostgreSQL refuses root).

  with PostgresServer() as pg:
      url = pg.url  # postgresql://shardlm@/postgres?host=/tmp/shardlm-pg-XXXX

Or around a command, which gets the URL in SHARDLM_TEST_POSTGRES_URL:
  python3 tests/testing/postgres_server.py -- build/tests/state_test
"""

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile


def bin_dir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL's initdb is missing: run scripts/setup.sh (Debian's postgresql)")
    return os.path.dirname(found[-1])


class PostgresServer:
    def __init__(self):
        self.dir = None
        self.url = None

    def _as_server(self, argv):
        """argv run as the user the server runs as (postgres when this is root)."""
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="shardlm-pg-")
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.dir, "data")
        b = bin_dir()
        for argv in ([os.path.join(b, "initdb"), "-D", data, "-U", "shardlm", "--auth=trust", "-E", "UTF8",
                      "--no-sync"],
                     [os.path.join(b, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "server.log"), "-w",
                      "-t", "60", "-o", "-k %s -c listen_addresses='' -c fsync=off -c max_connections=200" %
                      self.dir, "start"]):
            p = self._as_server(argv)
            if p.returncode != 0:
                log = os.path.join(self.dir, "server.log")
                tail = open(log).read()[-2000:] if os.path.exists(log) else ""
                self.stop()
                raise RuntimeError("%s failed (%d): %s %s %s" % (os.path.basename(argv[0]), p.returncode,
                                                                 p.stdout[-1000:], p.stderr[-1000:], tail))
        self.url = "postgresql://shardlm@/postgres?host=%s" % self.dir
        return self

    def stop(self):
        if self.dir is None:
            return
        data = os.path.join(self.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            self._as_server([os.path.join(bin_dir(), "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def psql(url, sql):
    """Runs `sql` on the database `url` names (psql, as the test's user); its output."""
    p = subprocess.run([os.path.join(bin_dir(), "psql"), url, "-v", "ON_ERROR_STOP=1", "-tAc", sql],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("psql %r: %s" % (sql, p.stderr.strip()))
    return p.stdout.strip()


def database_url(url, name, fresh=False):
    """The URL of database `name` on `url`'s server, made when missing (emptied first when fresh)."""
    if fresh:
        psql(url, 'DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
    if psql(url, "SELECT 1 FROM pg_database WHERE datname = '%s'" % name) != "1":
        psql(url, 'CREATE DATABASE "%s"' % name)
    base, _, query = url.partition("?")
    head = base[:base.rindex("/")] if base.count("/") > 2 else base
    return "%s/%s%s" % (head, name, "?" + query if query else "")


def main(argv):
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1:]
    with PostgresServer() as pg:
        env = dict(os.environ, SHARDLM_TEST_POSTGRES_URL=pg.url)
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
