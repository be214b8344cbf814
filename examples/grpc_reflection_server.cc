// A gRPC server for examples/greeter.proto on gRPC C++ (Debian's libgrpc++-dev 1.51) with the
// stock server reflection plugin on (libgrpc++_reflection: grpc.reflection.v1alpha), so a
// client can call it with no .proto: its code is generated from greeter.proto by protoc and
// grpc_cpp_plugin, and each request is decoded by protobuf's own C++ runtime, not by
// stairbench.
//
//   grpc_reflection_server PORT [--expect JSON] [--tls CERT KEY]
//
// With --tls it serves over TLS (grpcs://) with the PEM certificate and key given.
// It counts the calls of SayHello; with --expect (a HelloRequest in protobuf's JSON mapping,
// parsed by google::protobuf::util::JsonStringToMessage) it also counts the calls whose
// request equals it, field for field (MessageDifferencer). It listens on 127.0.0.1:PORT and
// prints "listening on PORT". A line "count" on standard input prints one JSON object on
// standard output, as examples/grpc_json_server.py does: {"calls": {"SayHello": n},
// "matched": n}. The other methods are left to the generated base class (UNIMPLEMENTED).
//
// Built by the tests (tests/it/grpc_reflection.rs) as:
//   protoc -I examples --cpp_out=OUT --grpc_out=OUT \
//       --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin greeter.proto
//   g++ -O1 -I OUT examples/grpc_reflection_server.cc OUT/greeter*.cc \
//       $(pkg-config --cflags --libs grpc++ protobuf) -lgrpc++_reflection

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <memory>
#include <string>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include "greeter.grpc.pb.h"

namespace {

std::atomic<long> calls{0};
std::atomic<long> matched{0};

class Greeter final : public greeter::Greeter::Service {
public:
    explicit Greeter(std::unique_ptr<greeter::HelloRequest> expected)
        : expected_(std::move(expected)) {}

    grpc::Status SayHello(grpc::ServerContext*, const greeter::HelloRequest* request,
                          greeter::HelloReply* reply) override {
        calls++;
        if (expected_ &&
            google::protobuf::util::MessageDifferencer::Equals(*request, *expected_)) {
            matched++;
        }
        reply->set_message("hello " + request->user().name());
        return grpc::Status::OK;
    }

private:
    // Read only once the server runs, so the handler threads share it without a lock.
    std::unique_ptr<greeter::HelloRequest> expected_;
};

// The --expect message, or none; exits with the parser's reason on a bad one.
std::unique_ptr<greeter::HelloRequest> parse_expected(const std::string& json) {
    auto message = std::make_unique<greeter::HelloRequest>();
    auto status = google::protobuf::util::JsonStringToMessage(json, message.get());
    if (!status.ok()) {
        std::cerr << "--expect is not a greeter.HelloRequest: " << status.ToString() << "\n";
        std::exit(2);
    }
    return message;
}

}  // namespace

// A file's whole text; exits naming it when it cannot be read.
std::string read_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        std::cerr << "cannot read " << path << "\n";
        std::exit(2);
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

int main(int argc, char** argv) {
    const char* usage = "usage: grpc_reflection_server PORT [--expect JSON] [--tls CERT KEY]\n";
    if (argc < 2) {
        std::cerr << usage;
        return 2;
    }
    const std::string port = argv[1];
    std::unique_ptr<greeter::HelloRequest> expected;
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    for (int i = 2; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--expect" && i + 1 < argc) {
            expected = parse_expected(argv[++i]);
        } else if (flag == "--tls" && i + 2 < argc) {
            grpc::SslServerCredentialsOptions tls;
            tls.pem_key_cert_pairs.push_back({read_file(argv[i + 2]), read_file(argv[i + 1])});
            credentials = grpc::SslServerCredentials(tls);
            i += 2;
        } else {
            std::cerr << usage;
            return 2;
        }
    }
    // Registers grpc.reflection.v1alpha.ServerReflection on every server built after it.
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    Greeter service(std::move(expected));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + port, credentials);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) {
        std::cerr << "cannot listen on 127.0.0.1:" << port << "\n";
        return 1;
    }
    std::cout << "listening on " << port << std::endl;
    // The server runs on gRPC's own threads; this one answers the test until stdin closes.
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line == "count") {
            std::cout << "{\"calls\": {\"SayHello\": " << calls.load()
                      << "}, \"matched\": " << matched.load() << "}" << std::endl;
        }
    }
    server->Shutdown();
    return 0;
}
