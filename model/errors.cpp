#include "model/errors.hpp"

namespace brigade::model {
namespace {

class ModelCategory final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "brigade.model"; }
    std::string message(int ev) const override {
        switch (static_cast<errc>(ev)) {
            case errc::io_error:
                return "I/O error";
            case errc::bad_format:
                return "malformed file";
            case errc::missing_tensor:
                return "missing tensor";
            case errc::shape_mismatch:
                return "shape mismatch";
            case errc::unsupported_dtype:
                return "unsupported dtype";
            case errc::unsupported_architecture:
                return "unsupported architecture";
            case errc::bad_config:
                return "bad model config";
            case errc::invalid_argument:
                return "invalid argument";
            case errc::out_of_range:
                return "out of range";
            case errc::bad_tokenizer:
                return "bad tokenizer";
            case errc::bad_input_text:
                return "bad input text";
            case errc::template_error:
                return "chat template error";
        }
        return "unknown model error";
    }
};

}  // namespace

const boost::system::error_category& model_category() noexcept {
    static const ModelCategory category;  // immutable after construction
    return category;
}

std::string Error::what() const {
    return model_category().message(static_cast<int>(code)) + ": " + message;
}

void throw_exception_from_error(const Error& e, const boost::source_location&) {
    throw ModelException(e);
}

}  // namespace brigade::model
