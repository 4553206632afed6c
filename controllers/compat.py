"""The one place that knows whether we run on os-ken or classic Ryu.

os-ken is the maintained fork of Ryu with the same API under another package
name; everything else in `controllers` imports from here.
"""

try:
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.lib.packet import arp, ether_types, ethernet, packet
    from os_ken.ofproto import ofproto_v1_3

    FRAMEWORK = "os_ken"
    BaseApp = app_manager.OSKenApp
except ImportError:  # classic Ryu (ryu-manager)
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.lib.packet import arp, ether_types, ethernet, packet
    from ryu.ofproto import ofproto_v1_3

    FRAMEWORK = "ryu"
    BaseApp = app_manager.RyuApp

__all__ = [
    "BaseApp",
    "app_manager",
    "ofp_event",
    "CONFIG_DISPATCHER",
    "MAIN_DISPATCHER",
    "set_ev_cls",
    "hub",
    "arp",
    "ethernet",
    "ether_types",
    "packet",
    "ofproto_v1_3",
    "FRAMEWORK",
]
