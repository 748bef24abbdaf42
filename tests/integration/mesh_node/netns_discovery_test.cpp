// Three nodes in three network namespaces on one bridge find each other by multicast beacons
// alone (no --peer, and an invite token without addresses), form one mesh and serve. The test
// builds the namespaces, veth pairs and bridge itself (needs root; skips, saying why, where
// `ip netns add` fails) on a private 10.77.x.0/24 and removes all of it at the end, also when
// the test fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "mesh/identity.hpp"
#include "tests/integration/mesh_node/mesh_cluster.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"

namespace brigade::test {
namespace {

// Runs a shell command, output discarded; its exit status.
int sh(const std::string& command) {
    const int rc = std::system((command + " >/dev/null 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// N namespaces, each with one veth end (10.77.S.1..N/24, default route via the bridge) whose
// other end is enslaved to a bridge in our namespace holding 10.77.S.254, so this process can
// reach every node's HTTP API. S comes from our pid so parallel runs do not collide.
class NetnsLan {
public:
    explicit NetnsLan(int n) {
        const int tag = static_cast<int>(::getpid() % 100000);
        subnet_ = "10.77." + std::to_string(20 + tag % 200);
        bridge_ = "bmbr" + std::to_string(tag);
        for (int i = 1; i <= n; ++i) {
            names_.push_back("bmns" + std::to_string(tag) + "-" + std::to_string(i));
        }
        if (sh("ip netns add " + names_[0]) != 0) {
            skip_ = "cannot create a network namespace (`ip netns add` failed: not root?)";
            names_.clear();
            return;
        }
        created_ns_ = 1;
        ok_ = build();
    }
    ~NetnsLan() {
        for (int i = 0; i < created_ns_; ++i) sh("ip netns del " + names_[static_cast<size_t>(i)]);
        for (std::size_t i = 0; i < names_.size(); ++i) sh("ip link del " + host_veth(i));
        sh("ip link del " + bridge_);
    }
    NetnsLan(const NetnsLan&) = delete;
    NetnsLan& operator=(const NetnsLan&) = delete;

    const std::string& skip_reason() const { return skip_; }
    bool ok() const { return ok_; }
    const std::string& error() const { return error_; }
    const std::string& ns(std::size_t i) const { return names_[i]; }
    std::string address(std::size_t i) const { return subnet_ + "." + std::to_string(i + 1); }

private:
    std::string host_veth(std::size_t i) const {
        return "bmh" + bridge_.substr(4) + "-" + std::to_string(i + 1);
    }
    bool run(const std::string& command) {
        if (sh(command) == 0) return true;
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
        for (std::size_t i = 0; i < names_.size(); ++i) {
            const auto host = host_veth(i);
            const std::string inner = "eth0";
            const auto in_ns = "ip netns exec " + names_[i] + " ";
            if (!run("ip link add " + host + " type veth peer name bmtmp" + bridge_.substr(4)) ||
                !run("ip link set bmtmp" + bridge_.substr(4) + " netns " + names_[i] + " name " +
                     inner) ||
                !run("ip link set " + host + " master " + bridge_ + " up") ||
                !run(in_ns + "ip link set lo up") ||
                !run(in_ns + "ip addr add " + address(i) + "/24 dev " + inner) ||
                !run(in_ns + "ip link set " + inner + " up") ||
                !run(in_ns + "ip route add default via " + subnet_ + ".254")) {
                return false;
            }
        }
        return true;
    }

    std::string subnet_;
    std::string bridge_;
    std::vector<std::string> names_;
    int created_ns_ = 0;
    bool ok_ = false;
    std::string skip_;
    std::string error_;
};

TEST(NetnsDiscovery, ThreeNamespacesFindEachOtherFormOneMeshAndServe) {
    NetnsLan lan(3);
    if (!lan.skip_reason().empty()) GTEST_SKIP() << lan.skip_reason();
    ASSERT_TRUE(lan.ok()) << lan.error();

    // The mesh exists before any node runs; its token carries no addresses, so only beacons
    // can tell the nodes where the others are.
    TempDir homes;
    const auto founder_home = homes.path() / "founder";
    std::filesystem::create_directories(founder_home);
    auto token = run_brigade_env({"mesh", "token"}, {{"BRIGADE_HOME", founder_home.string()}});
    ASSERT_EQ(token.exit_code, 0) << token.err;
    while (!token.out.empty() && token.out.back() == '\n') token.out.pop_back();
    const auto decoded = mesh::decode_invite_token(token.out);
    ASSERT_TRUE(decoded) << token.out;
    ASSERT_TRUE(decoded->addresses.empty()) << "the token would tell where the founder is";

    std::vector<std::unique_ptr<NodeProcess>> nodes;
    for (std::size_t i = 0; i < 3; ++i) {
        NodeSpec spec;
        spec.name = "ns" + std::to_string(i + 1);
        spec.netns = lan.ns(i);
        spec.http_host = lan.address(i);
        spec.mesh_port_file = false;  // the default mesh port: each namespace has its own
        spec.serve_args = {"--model",
                           demo_model_dir().string(),
                           "--threads",
                           "1",
                           "--ctx",
                           "256",
                           "--max-concurrency",
                           "4",
                           "--memory",
                           "2.6MB",
                           "--activations",
                           "f32",
                           "--expect-nodes",
                           "3"};
        if (i == 0) {
            spec.home = founder_home;
        } else {
            spec.serve_args.insert(spec.serve_args.end(), {"--join", token.out});
        }
        nodes.push_back(std::make_unique<NodeProcess>(spec));
        ASSERT_TRUE(nodes.back()->ready()) << nodes.back()->why();
    }
    std::vector<NodeProcess*> all;
    for (auto& n : nodes) all.push_back(n.get());
    std::string why;
    const auto views = wait_for_common_plan(all, 3, 3, Millis(60'000), why);
    std::string logs;
    for (auto& n : nodes) logs += n->logs(3000);
    ASSERT_FALSE(views.empty()) << why << "\n" << logs;
    // Each node reached the others at their namespace addresses.
    for (const auto& n : views[0]["nodes"]) {
        const auto addresses = n["addresses"].dump();
        EXPECT_NE(addresses.find(lan.address(0).substr(0, 8)), std::string::npos) << n.dump();
    }
    const auto prompt = demo_chat_prompt("Where do birds live?");
    const auto& ref = cached_reference(demo_model_dir(), prompt, 24, kDemoVocab);
    ASSERT_TRUE(ref.error.empty()) << ref.error;
    for (auto& n : nodes) {
        expect_exact(n->post("/v1/completions", completion_body(prompt, 24, 1)), ref,
                     "entered at " + n->name());
    }
}

}  // namespace
}  // namespace brigade::test
