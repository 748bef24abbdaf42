#pragma once
// N network namespaces on one bridge: a LAN on one machine for the multi-node tests. Each
// namespace has a veth ("eth0", 10.<a>.<s>.1..N/24, default route via the bridge) whose other end
// is enslaved to a bridge in our namespace holding 10.<a>.<s>.254, so this process reaches every
// node's API. <s> comes from our pid, so parallel test processes do not collide; <a> and the
// interface-name prefix tell the suites apart. `cut(i)` sets node i's bridge-side veth down: its
// packets are silently lost, exactly as with a pulled cable (no RST, no FIN); `heal(i)` sets it
// up again. Needs root (skips, saying why, where `ip netns add` fails); everything built is
// removed at the end, also when the test fails.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace brigade::test {

// Runs a shell command, output discarded; its exit status.
inline int run_quiet(const std::string& command) {
    const int rc = std::system((command + " >/dev/null 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class NetnsLan {
public:
    // `prefix`: two letters for the interface and namespace names (Linux allows 15 characters,
    // so keep it short); `second_octet`: the 10.x.0.0/16 the suite uses.
    NetnsLan(int n, const std::string& prefix, int second_octet) {
        const int tag = static_cast<int>(::getpid() % 100000);
        subnet_ = "10." + std::to_string(second_octet) + "." + std::to_string(20 + tag % 200);
        tag_ = prefix + std::to_string(tag);
        bridge_ = tag_ + "br";
        for (int i = 1; i <= n; ++i) names_.push_back(tag_ + "ns" + std::to_string(i));
        if (run_quiet("ip netns add " + names_[0]) != 0) {
            skip_ = "cannot create a network namespace (`ip netns add` failed: not root?)";
            names_.clear();
            return;
        }
        created_ns_ = 1;
        ok_ = build();
    }
    ~NetnsLan() {
        for (int i = 0; i < created_ns_; ++i) {
            run_quiet("ip netns del " + names_[static_cast<std::size_t>(i)]);
        }
        for (std::size_t i = 0; i < names_.size(); ++i) run_quiet("ip link del " + host_veth(i));
        run_quiet("ip link del " + bridge_);
    }
    NetnsLan(const NetnsLan&) = delete;
    NetnsLan& operator=(const NetnsLan&) = delete;

    const std::string& skip_reason() const { return skip_; }
    bool ok() const { return ok_; }
    const std::string& error() const { return error_; }
    const std::string& ns(std::size_t i) const { return names_.at(i); }
    std::string address(std::size_t i) const { return subnet_ + "." + std::to_string(i + 1); }

    bool cut(std::size_t i) { return run("ip link set " + host_veth(i) + " down"); }
    bool heal(std::size_t i) { return run("ip link set " + host_veth(i) + " up"); }

private:
    std::string host_veth(std::size_t i) const { return tag_ + "h" + std::to_string(i + 1); }
    bool run(const std::string& command) {
        if (run_quiet(command) == 0) return true;
        error_ = "failed: " + command;
        return false;
    }
    bool build() {
        for (std::size_t i = 1; i < names_.size(); ++i) {
            if (!run("ip netns add " + names_[i])) return false;
            ++created_ns_;
        }
        // Snooping off: with no multicast querier on this bridge, beacons must simply flood.
        if (!run("ip link add " + bridge_ + " type bridge mcast_snooping 0") ||
            !run("ip addr add " + subnet_ + ".254/24 dev " + bridge_) ||
            !run("ip link set " + bridge_ + " up")) {
            return false;
        }
        const std::string tmp = tag_ + "t";
        for (std::size_t i = 0; i < names_.size(); ++i) {
            const auto in_ns = "ip netns exec " + names_[i] + " ";
            if (!run("ip link add " + host_veth(i) + " type veth peer name " + tmp) ||
                !run("ip link set " + tmp + " netns " + names_[i] + " name eth0") ||
                !run("ip link set " + host_veth(i) + " master " + bridge_ + " up") ||
                !run(in_ns + "ip link set lo up") ||
                !run(in_ns + "ip addr add " + address(i) + "/24 dev eth0") ||
                !run(in_ns + "ip link set eth0 up") ||
                !run(in_ns + "ip route add default via " + subnet_ + ".254")) {
                return false;
            }
        }
        return true;
    }

    std::string subnet_;
    std::string tag_;
    std::string bridge_;
    std::vector<std::string> names_;
    int created_ns_ = 0;
    bool ok_ = false;
    std::string skip_;
    std::string error_;
};

}  // namespace brigade::test
