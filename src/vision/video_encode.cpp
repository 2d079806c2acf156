#include "vision/video_encode.h"

#include "m3/error.h"
#include "vision/av_error.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace m3::vision {
namespace {

// Owns everything one encode allocates; freed in reverse order whatever happens.
struct Writer {
  AVFormatContext* oc = nullptr;
  AVCodecContext* enc = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* pkt = nullptr;
  SwsContext* sws = nullptr;
  bool opened_file = false;
  ~Writer() {
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    avcodec_free_context(&enc);
    if (oc && opened_file) avio_closep(&oc->pb);
    avformat_free_context(oc);
  }
};

}  // namespace

bool has_video_encoder(const std::string& encoder) { return avcodec_find_encoder_by_name(encoder.c_str()) != nullptr; }

void encode_video_file(const std::string& path, const std::string& encoder, int width, int height, int fps_num,
                       int fps_den, int64_t count, const std::function<RgbImage(int64_t)>& frame_at) {
  av_log_set_level(AV_LOG_QUIET);
  M3_CHECK(width > 0 && height > 0 && fps_num > 0 && fps_den > 0 && count > 0, path, ": bad video parameters");
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder.c_str());
  M3_CHECK(codec, path, ": this libavcodec has no ", encoder, " encoder");
  Writer w;
  int err = avformat_alloc_output_context2(&w.oc, nullptr, nullptr, path.c_str());
  M3_CHECK(err >= 0 && w.oc, path, ": no container format for this file extension (", av_message(err), ")");
  AVStream* st = avformat_new_stream(w.oc, nullptr);
  w.enc = avcodec_alloc_context3(codec);
  w.frame = av_frame_alloc();
  w.pkt = av_packet_alloc();
  M3_CHECK(st && w.enc && w.frame && w.pkt, path, ": out of memory");

  // The encoder's first listed pixel format (yuv420p for x264/vp9/mpeg4, rgb8 for gif).
  AVPixelFormat pix = AV_PIX_FMT_YUV420P;
  if (codec->pix_fmts) pix = codec->pix_fmts[0];
  if (encoder == "gif") pix = AV_PIX_FMT_RGB8;
  w.enc->width = width;
  w.enc->height = height;
  w.enc->pix_fmt = pix;
  w.enc->time_base = AVRational{fps_den, fps_num};
  w.enc->framerate = AVRational{fps_num, fps_den};
  w.enc->gop_size = 12;
  w.enc->thread_count = 1;
  if (encoder == "libx264") av_opt_set(w.enc->priv_data, "preset", "ultrafast", 0);
  // B-frames: packets arrive out of presentation order, which the decoder must undo.
  if (encoder == "mpeg4") w.enc->max_b_frames = 2;
  if (encoder == "libvpx-vp9") {
    av_opt_set(w.enc->priv_data, "deadline", "realtime", 0);
    av_opt_set_int(w.enc->priv_data, "cpu-used", 8, 0);
  }
  if (w.oc->oformat->flags & AVFMT_GLOBALHEADER) w.enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  err = avcodec_open2(w.enc, codec, nullptr);
  M3_CHECK(err >= 0, path, ": cannot open the ", encoder, " encoder (", av_message(err), ")");
  M3_CHECK(avcodec_parameters_from_context(st->codecpar, w.enc) >= 0, path, ": bad encoder parameters");
  st->time_base = w.enc->time_base;
  st->avg_frame_rate = w.enc->framerate;
  if (!(w.oc->oformat->flags & AVFMT_NOFILE)) {
    err = avio_open(&w.oc->pb, path.c_str(), AVIO_FLAG_WRITE);
    M3_CHECK(err >= 0, path, ": cannot create (", av_message(err), ")");
    w.opened_file = true;
  }
  err = avformat_write_header(w.oc, nullptr);
  M3_CHECK(err >= 0, path, ": cannot write the header (", av_message(err), ")");

  w.frame->format = pix;
  w.frame->width = width;
  w.frame->height = height;
  M3_CHECK(av_frame_get_buffer(w.frame, 0) >= 0, path, ": out of memory");
  w.sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, pix, SWS_BICUBIC | SWS_ACCURATE_RND,
                         nullptr, nullptr, nullptr);
  M3_CHECK(w.sws, path, ": cannot convert RGB to ", av_get_pix_fmt_name(pix));

  auto write_packets = [&]() {
    for (;;) {
      const int e = avcodec_receive_packet(w.enc, w.pkt);
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      M3_CHECK(e >= 0, path, ": encoding failed (", av_message(e), ")");
      av_packet_rescale_ts(w.pkt, w.enc->time_base, st->time_base);
      w.pkt->stream_index = st->index;
      const int we = av_interleaved_write_frame(w.oc, w.pkt);
      M3_CHECK(we >= 0, path, ": write failed (", av_message(we), ")");
    }
  };
  for (int64_t i = 0; i < count; ++i) {
    const RgbImage img = frame_at(i);
    M3_CHECK(img.width == width && img.height == height, path, ": frame ", i, " is ", img.width, "x", img.height,
             ", expected ", width, "x", height);
    M3_CHECK(av_frame_make_writable(w.frame) >= 0, path, ": out of memory");
    const uint8_t* src[4] = {img.pixels.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {width * 3, 0, 0, 0};
    sws_scale(w.sws, src, src_stride, 0, height, w.frame->data, w.frame->linesize);
    w.frame->pts = i;
    err = avcodec_send_frame(w.enc, w.frame);
    M3_CHECK(err >= 0, path, ": encoding frame ", i, " failed (", av_message(err), ")");
    write_packets();
  }
  avcodec_send_frame(w.enc, nullptr);
  write_packets();
  err = av_write_trailer(w.oc);
  M3_CHECK(err >= 0, path, ": cannot finish the file (", av_message(err), ")");
}

}  // namespace m3::vision

namespace m3::vision {

void test_clip_color(int64_t i, uint8_t rgb[3]) {
  rgb[0] = uint8_t((i % 6) * 51);
  rgb[1] = uint8_t(((i / 6) % 6) * 51);
  rgb[2] = uint8_t(((i / 36) % 6) * 51);
}

RgbImage test_clip_frame(int64_t i, int width, int height) {
  RgbImage img(width, height);
  uint8_t id[3];
  test_clip_color(i, id);
  for (int y = 0; y < height; ++y) {
    uint8_t* row = img.row(y);
    for (int x = 0; x < width; ++x) {
      uint8_t* p = row + 3 * x;
      if (x < width / 2) {
        p[0] = id[0], p[1] = id[1], p[2] = id[2];
      } else {
        p[0] = uint8_t((x * 3 + int(i) * 8) & 255);
        p[1] = uint8_t((y * 4 + int(i) * 4) & 255);
        p[2] = uint8_t(((x + y) * 2) & 255);
      }
    }
  }
  return img;
}

}  // namespace m3::vision
