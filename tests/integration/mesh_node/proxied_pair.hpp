#pragma once
// Two mesh nodes that talk through a TcpProxy, so that a test can flip a bit in their traffic.
// The node with the lower id dials (its link wins when both dial), and the invite token it joins
// with carries no addresses (`brigade mesh token` made before the mesh starts), so the proxy is
// its only way to the other node, at least until each has learnt the other's address.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mesh/identity.hpp"
#include "tests/integration/mesh_node/mesh_node_util.hpp"
#include "tests/integration/mesh_node/pipeline_compare.hpp"
#include "tests/support/tcp_proxy.hpp"

namespace brigade::test {

struct ProxiedPair {
    TempDir homes;
    std::unique_ptr<NodeProcess> upper;  // higher node id: listens
    std::unique_ptr<NodeProcess> lower;  // lower node id: dials through the proxy
    std::unique_ptr<TcpProxy> proxy;
    std::string error;  // non-empty when the pair could not be started

    // Starts the upper node with `upper_args`, then the lower one with `lower_args` plus the
    // token and the proxy's address. Names are `prefix`-upper and `prefix`-lower.
    ProxiedPair(const std::string& prefix, const std::vector<std::string>& upper_args,
                std::vector<std::string> lower_args) {
        const auto h1 = homes.path() / "h1";
        const auto h2 = homes.path() / "h2";
        std::filesystem::create_directories(h1);
        std::filesystem::create_directories(h2);
        const auto id1 = home_env_id(h1);
        const auto id2 = home_env_id(h2);
        if (id1.empty() || id2.empty() || id1 == id2) {
            error = "brigade mesh id failed: '" + id1 + "' '" + id2 + "'";
            return;
        }
        const auto& upper_home = id1 > id2 ? h1 : h2;
        const auto& lower_home = id1 > id2 ? h2 : h1;
        const auto token = token_of_new_mesh(upper_home);
        const auto decoded = mesh::decode_invite_token(token);
        if (!decoded || !decoded->addresses.empty()) {
            error = "expected an invite token without addresses, got '" + token + "'";
            return;
        }
        auto spec = node_spec(prefix + "-upper", upper_args);
        spec.home = upper_home;
        upper = std::make_unique<NodeProcess>(spec);
        if (!upper->ready()) {
            error = upper->why();
            return;
        }
        const auto port = upper->mesh_port();
        if (!port) {
            error = "no mesh port\n" + upper->logs();
            return;
        }
        proxy = std::make_unique<TcpProxy>(*port);
        lower_args.insert(lower_args.end(), {"--join", token, "--peer",
                                             "127.0.0.1:" + std::to_string(proxy->port())});
        auto lspec = node_spec(prefix + "-lower", lower_args);
        lspec.home = lower_home;
        lower = std::make_unique<NodeProcess>(lspec);
        if (!lower->ready()) error = lower->why();
    }

    std::string logs() const {
        return (upper ? upper->logs(3000) : "") + (lower ? lower->logs(3000) : "");
    }

    // A greedy stream of `n_tokens` for `prompt` at `entry`, with one bit flipped in the
    // proxy's next byte (from the upper node to the lower one when `downstream`, else the other
    // way) once 12 pieces of text arrived: the record fails its authentication, the receiver
    // closes the link, and the nodes link again.
    struct CutStream {
        StreamReply reply;
        bool cut = false;
        std::chrono::steady_clock::time_point cut_at;
        double seconds_after_cut() const {
            return std::chrono::duration<double>(reply.ended - cut_at).count();
        }
    };
    CutStream stream_with_a_flipped_bit(NodeProcess& entry, const std::string& prompt, int n_tokens,
                                        bool downstream) {
        CutStream s;
        s.reply = http_stream(entry.url(), "/v1/completions", completion_body(prompt, n_tokens),
                              Millis(120'000), [&](std::size_t n) {
                                  if (n != 12 || s.cut) return;
                                  if (downstream) {
                                      proxy->corrupt_next_downstream_byte();
                                  } else {
                                      proxy->corrupt_next_upstream_byte();
                                  }
                                  s.cut = true;
                                  s.cut_at = std::chrono::steady_clock::now();
                              });
        return s;
    }

    // The stream ended well with `text`, far below the head's 60 s token timeout: the reset was
    // acted on, not waited out.
    void expect_whole(const CutStream& s, const std::string& text) const {
        std::printf("[ figure   ] link reset -> end of the stream: %.2f s\n",
                    s.seconds_after_cut());
        EXPECT_EQ(s.reply.status, 200) << s.reply.error_body;
        EXPECT_TRUE(s.reply.errors.empty())
            << (s.reply.errors.empty() ? "" : s.reply.errors.front()) << "\n"
            << logs();
        EXPECT_TRUE(s.reply.done);
        EXPECT_EQ(s.reply.content, text) << logs();
        EXPECT_LT(s.seconds_after_cut(), 15.0) << logs();
    }

    // Both nodes answer a 24-token greedy request for `user` with the reference text.
    void expect_both_serve(const std::string& user) const {
        const auto prompt = demo_chat_prompt(user);
        const auto& ref = cached_reference(demo_model_dir(), prompt, 24, kDemoVocab);
        ASSERT_TRUE(ref.error.empty()) << ref.error;
        for (auto* n : {upper.get(), lower.get()}) {
            const auto reply = n->post("/v1/completions", completion_body(prompt, 24));
            EXPECT_EQ(completion_text(reply), ref.text) << n->name() << ": " << reply.body;
        }
    }
};

}  // namespace brigade::test
