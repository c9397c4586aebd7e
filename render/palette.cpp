#include "palette.hpp"

#include <algorithm>

namespace dtsim::render::detail {
namespace {

constexpr Rgba kRampStart{0.14, 0.59, 0.24};  // green
constexpr Rgba kRampEnd{0.82, 0.16, 0.16};    // red

}  // namespace

BoxClass box_class(const Event& e) {
    switch (op_kind(e.op)) {
        case OpKind::compute: {
            const auto name = e.op.name();
            if (name == "loss") return BoxClass::loss;
            if (name.starts_with("backward")) return BoxClass::backward;
            return BoxClass::forward;
        }
        case OpKind::update: return BoxClass::update;
        case OpKind::collective: return BoxClass::collective;
        case OpKind::p2p: return BoxClass::p2p;
        case OpKind::other: break;
    }
    const auto name = e.op.name();
    if (name == "train") return BoxClass::train;
    if (name == "lost") return BoxClass::lost;
    if (name == "checkpoint") return BoxClass::checkpoint;
    if (name == "restart") return BoxClass::restart;
    if (name == "failure") return BoxClass::failure;
    if (name == "idle") return BoxClass::idle;
    return BoxClass::other;
}

StyleKey style_key(BoxClass cls, std::int32_t layer) {
    const auto l = static_cast<std::uint32_t>(std::clamp(layer, kNoLayer, 0xFFFFFE) + 1);
    return (static_cast<std::uint32_t>(cls) << 24) | l;
}

StyleKey style_key(const Event& e) { return style_key(box_class(e), e.layer); }

BoxClass key_class(StyleKey key) { return static_cast<BoxClass>(key >> 24); }

std::int32_t key_layer(StyleKey key) { return static_cast<std::int32_t>(key & 0xFFFFFF) - 1; }

Rgba layer_colour(std::int32_t layer, int layers) {
    if (layer < 0) return colours::no_layer;
    const double t = layers > 1 ? std::clamp(static_cast<double>(layer) / (layers - 1), 0.0, 1.0) : 0.0;
    return {kRampStart.r + t * (kRampEnd.r - kRampStart.r), kRampStart.g + t * (kRampEnd.g - kRampStart.g),
            kRampStart.b + t * (kRampEnd.b - kRampStart.b), 1};
}

Rgba lighter(Rgba c, double amount) {
    return {c.r + (1 - c.r) * amount, c.g + (1 - c.g) * amount, c.b + (1 - c.b) * amount, c.a};
}

Rgba over_white(Rgba c) { return {c.r * c.a + (1 - c.a), c.g * c.a + (1 - c.a), c.b * c.a + (1 - c.a), 1}; }

Rgba text_on(Rgba c) {
    const Rgba o = over_white(c);
    const double luminance = 0.2126 * o.r + 0.7152 * o.g + 0.0722 * o.b;
    return luminance < 0.5 ? Rgba{1, 1, 1, 1} : colours::text;
}

Rgba memory_kind_colour(std::string_view name, std::size_t index) {
    // ColorBrewer's Set2 (C. A. Brewer, colorbrewer2.org), a qualitative scheme apart from the
    // operations' colours above.
    static constexpr Rgba kSet2[] = {{0.553, 0.627, 0.796}, {0.988, 0.553, 0.384}, {0.906, 0.541, 0.765},
                                     {0.400, 0.761, 0.647}, {0.651, 0.847, 0.329}, {1.000, 0.851, 0.184},
                                     {0.898, 0.769, 0.580}, {0.702, 0.702, 0.702}};
    static constexpr std::string_view kNamed[] = {"weights", "gradients", "optimizer", "activations", "buffers"};
    for (std::size_t k = 0; k < std::size(kNamed); ++k)
        if (name == kNamed[k]) return kSet2[k];
    return kSet2[index % std::size(kSet2)];
}

Rgba pass_colour(PassKind kind, int chunk) {
    Rgba c = colours::pass_other;
    switch (kind) {
        case PassKind::forward: c = colours::pass_forward; break;
        case PassKind::backward: c = colours::pass_backward; break;
        case PassKind::input_grad: c = colours::pass_input; break;
        case PassKind::weight_grad: c = colours::pass_weight; break;
        case PassKind::recompute: c = colours::pass_recompute; break;
        case PassKind::overlap: c = colours::pass_overlap; break;
        case PassKind::other: return c;
    }
    return chunk > 0 ? lighter(c, std::min(0.75, 0.42 * chunk)) : c;
}

Rgba style_colour(StyleKey key, int layers) {
    const std::int32_t layer = key_layer(key);
    switch (key_class(key)) {
        case BoxClass::forward: return layer_colour(layer, layers);
        case BoxClass::backward: return lighter(layer_colour(layer, layers), colours::backward_lightening);
        case BoxClass::loss: return colours::loss;
        case BoxClass::update: return colours::update;
        case BoxClass::collective: {
            Rgba c = layer_colour(layer, layers);
            c.a = colours::collective_alpha;
            return c;
        }
        case BoxClass::p2p: return colours::p2p;
        case BoxClass::train: return colours::train;
        case BoxClass::lost: return colours::lost;
        case BoxClass::checkpoint: return colours::checkpoint;
        case BoxClass::restart: return colours::restart;
        case BoxClass::failure: return colours::failure;
        case BoxClass::idle: return colours::idle;
        case BoxClass::other: break;
    }
    return colours::other;
}

}  // namespace dtsim::render::detail
