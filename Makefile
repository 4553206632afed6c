# hpnlab: `sudo make demo` and `sudo make test` work on a fresh Debian 12 /
# Ubuntu 22.04+ machine: both install what is missing first (make setup).
# VENV: the virtualenv provision.sh made (HPNLAB_VENV when set, as in the VM tier)
VENV   ?= $(or $(HPNLAB_VENV),.venv)
PY     := $(VENV)/bin/python
HPNLAB := $(VENV)/bin/hpnlab
DEMO   ?= results/demo
# DILATION: time dilation for the demo's drills (hpnlab run --dilation N|auto);
# empty: what each scenario says
DILATION ?=
RUNFLAGS = $(if $(DILATION),--dilation $(DILATION))
# DEMO_ATTEMPTS: runs of each demo drill while the trust gate calls it
# untrustworthy (exit 4: the machine could not emulate it faithfully); a
# failed expectation is never run again
DEMO_ATTEMPTS ?= 1

.PHONY: setup test unit lint docs vagrant-validate format constraints integration test-vm test-vagrant demo drills bench capacity soak clean uninstall

setup:
	bash scripts/provision.sh

test: setup
	$(PY) -m pytest -q -rs tests

# unit and lint need no root: only a virtualenv that setup made once
$(PY):
	@echo "no virtualenv at $(VENV): run 'sudo make setup' once first" >&2; exit 2

unit: $(PY)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# the reference pages from the code, then the site (build/site), strict:
# a broken link or a stale reference page fails it
docs: $(PY)
	$(PY) scripts/reference.py
	$(PY) -m mkdocs build --strict --quiet

# The Vagrantfile as Vagrant reads it (Debian's vagrant, installed when
# missing: root); nothing is booted (see docs/install.md)
# (--ignore-provider: the providers' own blocks need their plugins to be read)
vagrant-validate:
	@command -v vagrant >/dev/null || { echo "installing vagrant (Debian's package)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends vagrant >/dev/null \
	    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends vagrant >/dev/null; }; }
	vagrant validate --ignore-provider

format: $(PY)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# the exact versions provisioning installs, from what this virtualenv holds
constraints: $(PY)
	@{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --local --exclude-editable | sort -f; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt; git diff --stat constraints.txt

integration: setup
	$(PY) -m pytest -q -rs -m integration tests/integration

# The full-kernel tier: the tests marked full_kernel and `make demo` in a
# Debian 12 VM (stock kernel, qemu), provisioned by scripts/provision.sh.
test-vm:
	bash scripts/vm/run.sh

# The Vagrant path for real: a box from the VM tier's image, `vagrant up`
# (libvirt; qemu without KVM) with this Vagrantfile, `make demo` over
# `vagrant ssh`, `vagrant destroy` (see docs/install.md for its timing)
test-vagrant:
	bash scripts/vagrant/run.sh

demo: setup
	@rm -rf $(DEMO)
	@drill() { n=1; while :; do \
	    $(HPNLAB) run "$$1" --out "$$2" $(RUNFLAGS) $$([ $$n -gt 1 ] && echo --force); rc=$$?; \
	    [ $$rc -eq 4 ] && [ $$n -lt $(DEMO_ATTEMPTS) ] || return $$rc; \
	    echo "($$1: attempt $$n of $(DEMO_ATTEMPTS) untrustworthy, for the reasons above: running it again)"; \
	    n=$$((n + 1)); done; }; \
	drill scenarios/dual-tor-link-failure.yaml $(DEMO)/dual-tor; dual=$$?; \
	drill scenarios/single-tor-link-failure.yaml $(DEMO)/single-tor; single=$$?; \
	echo; $(HPNLAB) compare $(DEMO)/dual-tor $(DEMO)/single-tor --plot $(DEMO)/compare.png; echo; \
	echo "Reports: $(DEMO)/dual-tor/summary.md  $(DEMO)/single-tor/summary.md (plots beside them)"; \
	test $$dual -eq 0 -a $$single -eq 0

drills: setup
	@rm -rf results/drills; fail=0; \
	for s in scenarios/*.yaml; do \
	  n=$$(basename $$s .yaml); \
	  $(HPNLAB) run $$s --out results/drills/$$n; rc=$$?; \
	  if [ $$rc -eq 3 ]; then echo "skipped $$n: this kernel lacks what it needs"; \
	  elif [ $$rc -ne 0 ]; then fail=1; fi; \
	done; \
	echo; $(HPNLAB) compare results/drills/*; exit $$fail

bench: setup
	$(PY) bench/bringup.py
	$(PY) bench/generator.py
	$(PY) bench/agents.py
	$(PY) bench/ovs_ports.py

capacity: setup
	$(PY) bench/capacity.py

soak: setup
	$(PY) bench/soak.py

# clean touches only what this folder's builds and runs made; a running
# fabric is left alone (stop your own with: hpnlab down)
clean:
	rm -rf results .pytest_cache build *.egg-info

# removes what setup and the runs put outside this folder: the
# /usr/local/bin/hpnlab link (if it is this clone's), the libraries and BPF
# objects hpnlab built and the calibration (/var/lib/hpnlab; a later run
# builds them again), and the sysctl file for Open vSwitch's buffers (the
# raised values themselves last until the next boot). Open vSwitch, the
# virtualenv and the apt packages stay.
uninstall:
	@if [ "$$(readlink /usr/local/bin/hpnlab)" = "$(abspath $(VENV))/bin/hpnlab" ]; then \
	  rm /usr/local/bin/hpnlab && echo "removed /usr/local/bin/hpnlab"; \
	else echo "/usr/local/bin/hpnlab is not this clone's link: left alone"; fi
	@if [ -d /var/lib/hpnlab ]; then \
	  rm -r /var/lib/hpnlab && echo "removed /var/lib/hpnlab (built libraries, BPF objects, calibration)"; fi
	@if [ -f /etc/sysctl.d/60-hpnlab-ovs.conf ]; then \
	  rm /etc/sysctl.d/60-hpnlab-ovs.conf && echo "removed /etc/sysctl.d/60-hpnlab-ovs.conf (the values stay until reboot)"; fi
