#include "vision/video_decode.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "base/read_file.h"
#include "m3/error.h"
#include "vision/av_error.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace m3::vision {
namespace {

// FFmpeg logs to stderr by default; our errors say what went wrong in one line instead.
void quiet_ffmpeg_logs() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

// Bytes in memory seen through an AVIOContext (read + seek, including AVSEEK_SIZE).
struct MemoryReader {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;

  static int read(void* opaque, uint8_t* buf, int n) {
    auto* m = static_cast<MemoryReader*>(opaque);
    const size_t left = m->size - m->pos;
    if (left == 0) return AVERROR_EOF;
    const size_t k = std::min(left, size_t(n));
    std::memcpy(buf, m->data + m->pos, k);
    m->pos += k;
    return int(k);
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemoryReader*>(opaque);
    if (whence & AVSEEK_SIZE) return int64_t(m->size);
    int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = int64_t(m->pos); break;
      case SEEK_END: base = int64_t(m->size); break;
      default: return AVERROR(EINVAL);
    }
    const int64_t p = base + offset;
    if (p < 0 || p > int64_t(m->size)) return AVERROR(EINVAL);
    m->pos = size_t(p);
    return p;
  }
};

// One opened demuxer (+ its memory reader when reading bytes). Freed in reverse order.
struct Demuxer {
  AVFormatContext* fmt = nullptr;
  AVIOContext* avio = nullptr;
  MemoryReader mem;
  int stream = -1;

  Demuxer() = default;
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;
  ~Demuxer() {
    avformat_close_input(&fmt);
    if (avio) {
      av_freep(&avio->buffer);
      avio_context_free(&avio);
    }
  }
};

struct PacketPtr {
  AVPacket* p = av_packet_alloc();
  ~PacketPtr() { av_packet_free(&p); }
};
struct FramePtr {
  AVFrame* f = av_frame_alloc();
  ~FramePtr() { av_frame_free(&f); }
};
struct CodecPtr {
  AVCodecContext* c = nullptr;
  ~CodecPtr() { avcodec_free_context(&c); }
};
struct ScalerPtr {
  SwsContext* s = nullptr;
  ~ScalerPtr() { sws_freeContext(s); }
};

}  // namespace

struct VideoSource::Impl {
  std::string name;
  std::string path;                  // empty when reading bytes
  const uint8_t* data = nullptr;     // bytes input
  size_t size = 0;
  VideoLimits limits;
  VideoInfo info;

  // Opens the container and finds its best video stream.
  void open(Demuxer& d) const {
    quiet_ffmpeg_logs();
    d.fmt = avformat_alloc_context();
    M3_CHECK(d.fmt, name, ": out of memory opening the video");
    if (!path.empty()) {
      check_regular_file(path, "a video file");  // FFmpeg would report a folder as "invalid data"
      AVFormatContext* fmt = d.fmt;
      const int err = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr);
      d.fmt = fmt;  // avformat_open_input frees it and sets it to null on failure
      if (err == AVERROR(ENOENT)) fail(path, ": no such file");
      M3_CHECK(err >= 0, path, ": not a readable video (", av_message(err), "; corrupt, truncated or not a video format)");
    } else {
      d.mem = MemoryReader{data, size, 0};
      constexpr int kBuffer = 1 << 16;
      auto* buf = static_cast<uint8_t*>(av_malloc(kBuffer));
      M3_CHECK(buf, name, ": out of memory opening the video");
      d.avio = avio_alloc_context(buf, kBuffer, 0, &d.mem, &MemoryReader::read, nullptr, &MemoryReader::seek);
      if (!d.avio) {
        av_free(buf);
        fail(name, ": out of memory opening the video");
      }
      d.fmt->pb = d.avio;
      AVFormatContext* fmt = d.fmt;
      const int err = avformat_open_input(&fmt, nullptr, nullptr, nullptr);
      d.fmt = fmt;
      M3_CHECK(err >= 0, name, ": not a readable video (", av_message(err), "; corrupt, truncated or not a video format)");
    }
    const int err = avformat_find_stream_info(d.fmt, nullptr);
    M3_CHECK(err >= 0, name, ": cannot read the stream information (", av_message(err), "; corrupt or truncated)");
    d.stream = av_find_best_stream(d.fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    // Cover art (an attached picture) is a one-frame "video" stream; prefer a real one.
    if (d.stream >= 0 && (d.fmt->streams[d.stream]->disposition & AV_DISPOSITION_ATTACHED_PIC))
      for (unsigned i = 0; i < d.fmt->nb_streams; ++i) {
        const AVStream* st = d.fmt->streams[i];
        if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
          d.stream = int(i);
          break;
        }
      }
    M3_CHECK(d.stream >= 0, name, ": has no video stream");
  }

  // Walks the packets of the video stream once, without decoding: frame count and size checks.
  void probe() {
    Demuxer d;
    open(d);
    const AVStream* st = d.fmt->streams[d.stream];
    const AVCodecParameters* par = st->codecpar;
    info.width = par->width;
    info.height = par->height;
    info.container = d.fmt->iformat && d.fmt->iformat->name ? d.fmt->iformat->name : "?";
    const AVCodecDescriptor* desc = avcodec_descriptor_get(par->codec_id);
    info.codec = desc ? desc->name : "unknown";
    M3_CHECK(info.width > 0 && info.height > 0, name, ": video stream has no frame size (", info.width, "x",
             info.height, ")");
    M3_CHECK(int64_t(info.width) * info.height <= limits.max_frame_pixels, name, ": video frames are ", info.width,
             "x", info.height, " = ", int64_t(info.width) * info.height, " pixels, more than the limit of ",
             limits.max_frame_pixels);
    M3_CHECK(avcodec_find_decoder(par->codec_id), name, ": no decoder for the video codec ", info.codec);
    AVRational r = st->avg_frame_rate;
    if (r.num <= 0 || r.den <= 0) r = st->r_frame_rate;
    M3_CHECK(r.num > 0 && r.den > 0, name, ": the video stream has no frame rate");
    info.fps = av_q2d(r);

    PacketPtr pkt;
    M3_CHECK(pkt.p, name, ": out of memory");
    const int64_t frame_cap = std::min<int64_t>(limits.max_frames, int64_t(limits.max_duration_s * info.fps) + 1);
    for (;;) {
      const int err = av_read_frame(d.fmt, pkt.p);
      if (err == AVERROR_EOF) break;
      M3_CHECK(err >= 0, name, ": cannot read packet ", info.frames, " of the video (", av_message(err),
               "; corrupt or truncated)");
      // Packets an MP4 edit list cuts away are decoded but never output: not frames of the video.
      if (pkt.p->stream_index == d.stream && !(pkt.p->flags & AV_PKT_FLAG_DISCARD)) {
        ++info.frames;
        M3_CHECK(info.frames <= frame_cap, name, ": video has more than ", frame_cap,
                 " frames (limits: ", limits.max_frames, " frames, ", limits.max_duration_s, " s at ", info.fps,
                 " fps)");
      }
      av_packet_unref(pkt.p);
    }
    M3_CHECK(info.frames > 0, name, ": the video stream has no frames");
    info.duration_s = double(info.frames) / info.fps;
    // A cut-off file often still demuxes cleanly up to the cut: compare with what the header
    // promised (frame count, else the stream's duration, else a single-stream file's duration).
    M3_CHECK(st->nb_frames <= 0 || info.frames >= st->nb_frames, name, ": only ", info.frames, " of the ",
             st->nb_frames, " frames the header lists could be read (truncated or corrupt)");
    double declared = 0;
    if (st->duration > 0 && st->duration != AV_NOPTS_VALUE) declared = double(st->duration) * av_q2d(st->time_base);
    else if (d.fmt->nb_streams == 1 && d.fmt->duration > 0) declared = double(d.fmt->duration) / AV_TIME_BASE;
    M3_CHECK(declared <= 0 || info.duration_s + 2.0 / info.fps >= 0.9 * declared, name, ": only ", info.frames,
             " frames (", info.duration_s, " s) could be read but the header declares ", declared,
             " s (truncated or corrupt)");
  }
};

VideoSource::VideoSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoSource::VideoSource(VideoSource&&) noexcept = default;
VideoSource& VideoSource::operator=(VideoSource&&) noexcept = default;
VideoSource::~VideoSource() = default;

VideoSource VideoSource::open_file(const std::string& path, const VideoLimits& limits) {
  auto impl = std::make_unique<Impl>();
  impl->name = impl->path = path;
  M3_CHECK(!path.empty(), "video: empty file name");
  impl->limits = limits;
  impl->probe();
  return VideoSource(std::move(impl));
}

VideoSource VideoSource::open_bytes(const uint8_t* data, size_t size, const std::string& name,
                                    const VideoLimits& limits) {
  M3_CHECK(size > 0, name, ": empty video data");
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->data = data;
  impl->size = size;
  impl->limits = limits;
  impl->probe();
  return VideoSource(std::move(impl));
}

const VideoInfo& VideoSource::info() const { return impl_->info; }
const std::string& VideoSource::name() const { return impl_->name; }

void VideoSource::decode_frames(const std::vector<int64_t>& wanted,
                                const std::function<void(int64_t, RgbImage&&)>& on_frame) const {
  const std::string& name = impl_->name;
  for (size_t i = 0; i < wanted.size(); ++i)
    M3_CHECK(wanted[i] >= 0 && (i == 0 || wanted[i] > wanted[i - 1]), name,
             ": frame indices must be sorted, unique and non-negative");
  if (wanted.empty()) return;

  Demuxer d;
  impl_->open(d);
  const AVCodecParameters* par = d.fmt->streams[d.stream]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  M3_CHECK(codec, name, ": no decoder for the video codec ", impl_->info.codec);
  CodecPtr dec;
  dec.c = avcodec_alloc_context3(codec);
  M3_CHECK(dec.c, name, ": out of memory");
  M3_CHECK(avcodec_parameters_to_context(dec.c, par) >= 0, name, ": bad codec parameters");
  dec.c->thread_count = 1;  // the caller's thread pool owns the cores
  int err = avcodec_open2(dec.c, codec, nullptr);
  M3_CHECK(err >= 0, name, ": cannot open the ", impl_->info.codec, " decoder (", av_message(err), ")");

  PacketPtr pkt;
  FramePtr frame;
  ScalerPtr scaler;
  M3_CHECK(pkt.p && frame.f, name, ": out of memory");
  int64_t index = 0;  // frames output so far
  size_t next = 0;    // position in `wanted`

  // Takes every frame the decoder has ready; returns false once all wanted frames are out.
  auto drain = [&]() -> bool {
    for (;;) {
      const int e = avcodec_receive_frame(dec.c, frame.f);
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return true;
      M3_CHECK(e >= 0, name, ": cannot decode frame ", index, " (", av_message(e), "; corrupt video)");
      const int64_t i = index++;
      if (i == wanted[next]) {
        const int w = frame.f->width, h = frame.f->height;
        M3_CHECK(w > 0 && h > 0 && int64_t(w) * h <= impl_->limits.max_frame_pixels, name, ": frame ", i, " is ",
                 w, "x", h, " (limit ", impl_->limits.max_frame_pixels, " pixels)");
        // Full chroma interpolation and accurate rounding: the conversion itself should not blur.
        scaler.s = sws_getCachedContext(scaler.s, w, h, AVPixelFormat(frame.f->format), w, h, AV_PIX_FMT_RGB24,
                                        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr,
                                        nullptr);
        M3_CHECK(scaler.s, name, ": cannot convert pixel format ",
                 av_get_pix_fmt_name(AVPixelFormat(frame.f->format)) ? av_get_pix_fmt_name(AVPixelFormat(frame.f->format)) : "?",
                 " to RGB");
        // YUV -> RGB with the stream's own matrix and range (BT.601 limited when unspecified).
        int* inv_table = nullptr;
        int* table = nullptr;
        int src_range = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
        if (sws_getColorspaceDetails(scaler.s, &inv_table, &src_range, &table, &dst_range, &brightness, &contrast,
                                     &saturation) >= 0) {
          const int cs = frame.f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : int(frame.f->colorspace);
          const int full = frame.f->color_range == AVCOL_RANGE_JPEG ? 1 : src_range;
          sws_setColorspaceDetails(scaler.s, sws_getCoefficients(cs), full, table, dst_range, brightness, contrast,
                                   saturation);
        }
        RgbImage rgb(w, h);
        uint8_t* dst[4] = {rgb.pixels.data(), nullptr, nullptr, nullptr};
        int dst_stride[4] = {w * 3, 0, 0, 0};
        const int rows = sws_scale(scaler.s, frame.f->data, frame.f->linesize, 0, h, dst, dst_stride);
        M3_CHECK(rows == h, name, ": converting frame ", i, " to RGB failed");
        av_frame_unref(frame.f);
        on_frame(i, std::move(rgb));
        if (++next == wanted.size()) return false;
      } else {
        av_frame_unref(frame.f);
      }
    }
  };

  bool more = true;
  while (more) {
    err = av_read_frame(d.fmt, pkt.p);
    if (err == AVERROR_EOF) break;
    M3_CHECK(err >= 0, name, ": cannot read the video after frame ", index, " (", av_message(err),
             "; corrupt or truncated)");
    if (pkt.p->stream_index == d.stream) {
      err = avcodec_send_packet(dec.c, pkt.p);
      // EAGAIN: the decoder holds output first; take it, then the packet goes in.
      while (err == AVERROR(EAGAIN) && (more = drain())) err = avcodec_send_packet(dec.c, pkt.p);
      av_packet_unref(pkt.p);
      if (!more) break;
      M3_CHECK(err >= 0, name, ": cannot decode the video after frame ", index, " (", av_message(err),
               "; corrupt video)");
      more = drain();
    } else {
      av_packet_unref(pkt.p);
    }
  }
  if (more) {  // end of the file: flush the frames the decoder still holds
    avcodec_send_packet(dec.c, nullptr);
    more = drain();
  }
  M3_CHECK(!more, name, ": the video ended after ", index, " decoded frames, before frame ", wanted[next],
           " (the container lists ", impl_->info.frames, "; truncated or corrupt)");
}

}  // namespace m3::vision
