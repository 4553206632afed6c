"""Start the HPN controller on os-ken, listening on loopback only.

    python -m controllers.run --fabric FABRIC.json --port 6653 [--jobs-socket PATH]

(`ryu-manager controllers.hpn_app` works too where classic Ryu is installed,
with HPNLAB_FABRIC set.)
"""
import argparse
import os


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fabric", required=True, help="fabric model JSON (hpnlab topo show --json)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=6653)
    ap.add_argument("--jobs-socket", help="job channel: a Unix socket (0600) to listen on")
    args = ap.parse_args(argv)
    os.environ["HPNLAB_FABRIC"] = os.path.abspath(args.fabric)
    if args.jobs_socket:
        os.environ["HPNLAB_JOBS_SOCKET"] = os.path.abspath(args.jobs_socket)

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", args.host)
    cfg.CONF.set_override("ofp_tcp_listen_port", args.port)
    AppManager.run_apps(["controllers.hpn_app"])


if __name__ == "__main__":
    main()
